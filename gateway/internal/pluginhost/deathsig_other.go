//go:build !linux

package pluginhost

import "os/exec"

// dieWithGateway does nothing where the kernel offers no parent-death
// signal; a plugin then outlives a gateway that was killed.
func dieWithGateway(*exec.Cmd) {}
