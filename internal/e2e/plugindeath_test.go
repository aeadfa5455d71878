package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestPluginDiesWithGateway kills the wsgate process with SIGKILL and
// checks that its auth plugin process goes too. It pins a leak: a gateway
// that crashed (or was killed by a test's cleanup) left its plugins running
// forever, reparented to init.
func TestPluginDiesWithGateway(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 1, "")
	jwt := testproc.Build(t, "./plugins/jwt")
	plugins := "[[plugins]]\nname = \"jwt\"\npath = \"" + jwt + "\"\n  [plugins.config]\n  hs256_secret_env = \"WSGATE_E2E_JWT\"\n\n" +
		"[[routes]]\npath_prefix = \"/room/auth-\"\npool = \"relay\"\nauth = [\"jwt\"]\n"
	startGatewayCmd(t, st, "", plugins, func(cmd *exec.Cmd) {
		cmd.Env = append(os.Environ(), "WSGATE_E2E_JWT=s3cret")
	})
	kids := childrenOf(t, st.gw.Pid())
	if len(kids) == 0 {
		t.Fatal("the gateway started no plugin process")
	}
	if err := st.gw.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := st.gw.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, pid := range kids {
		deadline := time.Now().Add(10 * time.Second) // a bound, not a speed
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL) // the test's own leak: clean it up
				t.Fatalf("plugin process %d still running 10s after its gateway was killed", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ")".
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}
