// Package testproc builds the module's commands and runs them as real
// processes for integration tests: free loopback ports, logs kept for the
// failure report, readiness polled with a deadline, every process stopped
// by its own PID when the test ends.
package testproc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// Build compiles the main package pkg (a path inside this module such as
// "./cmd/wsgate") once per test binary and returns the executable's path.
// The command is built with the race detector when the test binary is.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "wsgate-bin-")
		if err != nil {
			tb.Fatal(err)
		}
		buildDir = d
	}
	root, err := moduleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the wsgate module")
	}
	return filepath.Dir(mod), nil
}

// FreeAddr returns a 127.0.0.1:port address reserved for the caller until
// the test ends, whatever the kernel's ephemeral port range: a socket of
// this process stays bound to the port, so neither an outgoing
// connection's source port nor another bind (another FreeAddr, a
// listen(":0")) can take it, while a listener that sets SO_REUSEADDR, as
// every Go listener, redis-server and the commands of this module do, can
// still open it. A process that binds without SO_REUSEADDR gets "address
// already in use".
//
// Picking a port that is free a moment ago and closing it is not enough:
// until the caller's process listens, the kernel may hand the port to any
// connection as its source port, which is what happens when the ephemeral
// range covers every port (ip_local_port_range "1024 65535", as
// docs/scaling.md advises).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	fd, port, err := reservePort()
	if err != nil {
		tb.Fatalf("reserve a loopback port: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// reservePort binds a TCP socket to a port of 127.0.0.1 the kernel
// chooses and returns the socket (never listening) and the port. The bind
// is made without SO_REUSEADDR, so it succeeds only on a port no socket
// holds, not even one in TIME_WAIT; SO_REUSEADDR is set afterwards, which
// lets a listener with SO_REUSEADDR bind beside it (the kernel allows that
// when neither of two such sockets listens yet) while a bind without it
// still fails. The kernel's connect() never picks a port an explicit bind
// holds as a source port.
func reservePort() (fd, port int, err error) {
	syscall.ForkLock.RLock() // no child inherits the socket before it is close-on-exec
	fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, 0, fmt.Errorf("socket: %w", err)
	}
	fail := func(what string, err error) (int, int, error) {
		_ = syscall.Close(fd)
		return -1, 0, fmt.Errorf("%s: %w", what, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail("bind 127.0.0.1:0", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail("set SO_REUSEADDR", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		return fail("getsockname", fmt.Errorf("unexpected address %T", sa))
	}
	return fd, in4.Port, nil
}

// Proc is one running process started by Start.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// Start runs bin with args. Its output goes to a file (not a pipe, so
// waiting for it does not wait for children that inherit its output) and
// is printed if the test fails; it is killed (by PID) at the end of the
// test if still running.
func Start(tb testing.TB, name, bin string, args ...string) *Proc {
	tb.Helper()
	return StartCmd(tb, name, exec.Command(bin, args...))
}

// StartCmd is Start for a command the caller prepared (its environment,
// extra files, a wrapper program); its Stdout and Stderr are set here.
func StartCmd(tb testing.TB, name string, cmd *exec.Cmd) *Proc {
	tb.Helper()
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	f, err := os.CreateTemp(tb.TempDir(), name+"-*.log")
	if err != nil {
		tb.Fatal(err)
	}
	p.log = f
	p.cmd.Stdout = f
	p.cmd.Stderr = f
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if tb.Failed() {
			tb.Logf("--- %s output:\n%s", name, p.Output())
		}
		p.log.Close()
	})
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Output is what the process printed so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.log.Name())
	return string(b)
}

// Wait waits up to timeout for the process to exit and returns its exit code.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s still running after %v", p.Name, timeout)
	}
	if p.err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), nil
	}
	return -1, p.err
}

// WaitHTTP polls url until it answers want, or fails the test after timeout.
func WaitHTTP(tb testing.TB, url string, want int, timeout time.Duration) {
	tb.Helper()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("%s did not answer %d within %v (last: %s)", url, want, timeout, last)
}

// Buffer is a bytes.Buffer safe for concurrent writes and reads: a log
// sink for a process's or a plugin's output while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
