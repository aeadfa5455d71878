package pluginhost

import (
	"os/exec"
	"syscall"
)

// dieWithGateway has the kernel kill the plugin process when the gateway
// dies, however it dies (a crash, SIGKILL, the OOM killer): a plugin
// outliving its gateway would hold its memory and descriptors forever. The
// signal follows the death of the thread that started the plugin; the
// gateway never ends a thread of its own (it locks none to a goroutine).
func dieWithGateway(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
