// Package handoff passes a server's listening sockets to a new process of
// the same server, so a binary upgrade refuses no connection: the sockets
// (and what waits in their accept queues) are never closed, only shared
// until the old process stops accepting.
//
// The old process calls Spawn with its listeners. The new process finds
// them with Inherited, serves, and calls Ready once it accepts; Spawn
// returns then, and the old process drains and exits.
package handoff

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment variables a new process reads.
const (
	// EnvListeners lists the inherited sockets' addresses, comma separated,
	// in the order of their descriptors from 3 on.
	EnvListeners = "WSGATE_LISTEN_ADDRS"
	// EnvReadyFD is the descriptor the new process writes "ready" to.
	EnvReadyFD = "WSGATE_READY_FD"
)

// ErrNotReady means the new process exited or timed out before it was
// ready; the old process keeps serving.
var ErrNotReady = errors.New("handoff: new process not ready")

// Spawn starts the executable at path with args, handing it the listeners
// (by their configured address), and waits until it reports ready or
// timeout passes. The child's output goes to stdout and stderr. On success
// it returns the child's PID; the child is not waited for (it outlives the
// caller).
func Spawn(path string, args []string, listeners map[string]net.Listener, stdout, stderr *os.File, timeout time.Duration) (int, error) {
	addrs := make([]string, 0, len(listeners))
	for a := range listeners {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, a := range addrs {
		fl, ok := listeners[a].(interface{ File() (*os.File, error) })
		if !ok {
			return 0, fmt.Errorf("handoff: listener %s cannot give its file", a)
		}
		f, err := fl.File()
		if err != nil {
			return 0, fmt.Errorf("handoff: listener %s: %w", a, err)
		}
		files = append(files, f)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("handoff: ready pipe: %w", err)
	}
	defer r.Close()
	files = append(files, w)

	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = files
	cmd.Env = append(withoutHandoff(os.Environ()),
		EnvListeners+"="+strings.Join(addrs, ","),
		EnvReadyFD+"="+strconv.Itoa(3+len(addrs)))
	// Its own process group: a signal meant for the old process's group
	// (Ctrl-C in a terminal) must not reach the new one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("handoff: start %s: %w", path, err)
	}
	w.Close() // the child holds its copy; EOF then means the child is gone
	files = files[:len(files)-1]

	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		if err == nil && strings.TrimSpace(line) == "ready" {
			ready <- nil
			return
		}
		ready <- fmt.Errorf("%w: %q %v", ErrNotReady, line, err)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return 0, err
		}
	case <-timer.C:
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, fmt.Errorf("%w within %v", ErrNotReady, timeout)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

func withoutHandoff(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvListeners+"=") || strings.HasPrefix(kv, EnvReadyFD+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Inherited is what a process started by Spawn received.
type Inherited struct {
	listeners map[string]net.Listener
	ready     *os.File
}

// FromEnv returns the sockets passed by Spawn, or nil when this process was
// not started by one.
func FromEnv() (*Inherited, error) {
	list := os.Getenv(EnvListeners)
	if list == "" {
		return nil, nil
	}
	in := &Inherited{listeners: map[string]net.Listener{}}
	for i, a := range strings.Split(list, ",") {
		f := os.NewFile(uintptr(3+i), "listener "+a)
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("handoff: inherited listener %s: %w", a, err)
		}
		in.listeners[a] = ln
	}
	if fd, err := strconv.Atoi(os.Getenv(EnvReadyFD)); err == nil {
		in.ready = os.NewFile(uintptr(fd), "ready")
	}
	os.Unsetenv(EnvListeners)
	os.Unsetenv(EnvReadyFD)
	return in, nil
}

// Listen returns the inherited listener for addr, or a new one when none
// was passed for it (the config changed its address).
func (in *Inherited) Listen(addr string) (net.Listener, error) {
	if in != nil {
		if ln, ok := in.listeners[addr]; ok {
			delete(in.listeners, addr)
			return ln, nil
		}
	}
	return net.Listen("tcp", addr)
}

// Ready tells the old process this one accepts, and closes the inherited
// listeners nobody asked for.
func (in *Inherited) Ready() error {
	if in == nil {
		return nil
	}
	for a, ln := range in.listeners {
		ln.Close()
		delete(in.listeners, a)
	}
	if in.ready == nil {
		return nil
	}
	defer in.ready.Close()
	_, err := in.ready.WriteString("ready\n")
	return err
}
