// Package stack runs the processes a benchmark measures, as real processes
// on 127.0.0.1: redis-server, relay-backend replicas and wsgate gateways in
// front of them. Every process is started by this package, remembered by its
// PID and stopped by that PID (SIGTERM, then SIGKILL after a deadline); its
// output goes to a log file in the stack's directory.
package stack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ErrStackExited is returned when a process ends while the stack waits for
// it to become ready; its log file says why.
var ErrStackExited = errors.New("stack: process exited")

// Proc is one process started by Start. Its methods are safe for concurrent
// use; a Proc must not be copied.
type Proc struct {
	// Name names the process in errors and log files.
	Name string
	// Log is the path of the file holding its stdout and stderr.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs bin with args, its output appended to logPath. The process
// gets its own process group, so a Ctrl-C at the terminal reaches only the
// runner, which then stops it in order; it also receives SIGTERM if the
// runner dies.
func Start(name, logPath, bin string, args ...string) (*Proc, error) {
	return StartEnv(name, logPath, nil, bin, args...)
}

// StartEnv is Start with env ("KEY=value") added to the runner's own
// environment.
func StartEnv(name, logPath string, env []string, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go p.wait()
	return p, nil
}

func (p *Proc) wait() {
	p.err = p.cmd.Wait()
	close(p.done)
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process (by its PID) unless it has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("signal %s: %w", p.Name, ErrStackExited)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the process to exit on its own and returns
// its exit code.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return -1, fmt.Errorf("%s still running after %v", p.Name, timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0, nil
	case errors.As(p.err, &ee):
		return ee.ExitCode(), nil
	}
	return -1, p.err
}

// Stop sends SIGTERM, waits up to grace for the exit, then sends SIGKILL and
// waits for it. It is a no-op on a process that has exited.
func (p *Proc) Stop(grace time.Duration) {
	if p.Signal(syscall.SIGTERM) != nil {
		<-p.done
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// FreeAddr returns a 127.0.0.1:port address that was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady calls ready every 20ms until it returns nil, the process exits
// or timeout passes.
func waitReady(p *Proc, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	err := ready()
	for err != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", p.Name, timeout, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s (log %s): %w", p.Name, p.Log, ErrStackExited)
		case <-time.After(20 * time.Millisecond):
		}
		err = ready()
	}
	return nil
}
