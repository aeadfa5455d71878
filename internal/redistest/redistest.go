// Package redistest starts throwaway redis-server processes for tests: a
// single server, a Redis Cluster of three masters and three replicas, or a
// Sentinel. Every process is stopped by its PID when the test ends.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Binary is the redis-server executable the tests use.
const Binary = "/usr/bin/redis-server"

// CLI is the redis-cli executable that creates clusters.
const CLI = "/usr/bin/redis-cli"

// Server is one redis-server process started by Start. It is not safe for
// concurrent use.
type Server struct {
	// Addr is the server's 127.0.0.1:port address.
	Addr string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	dir  string
	args []string // beyond the defaults
}

// URL returns the redis:// URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start runs redis-server on a free loopback port without persistence and
// waits until it answers PING. It stops the process (by its PID) when the
// test ends. When the binary is missing it skips the test, except under CI
// (CI set in the environment), where a skip would hide a missing install.
// What go-redis clients log goes to the test's log if it fails, not to the
// binary's output (QuietClients).
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartArgs(tb, "--save", "", "--appendonly", "no")
}

// StartArgs is Start with more redis-server arguments, e.g. "--replicaof",
// "127.0.0.1 6379"; a first argument without "--" is a configuration file.
func StartArgs(tb testing.TB, args ...string) *Server {
	tb.Helper()
	need(tb, Binary)
	QuietClients(tb)
	var lastErr error
	for range 5 {
		s, err := start(tb.TempDir(), args)
		if err == nil {
			tb.Cleanup(s.stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("start redis-server: %v", lastErr)
	return nil
}

// need skips the test when bin is missing, except under CI (CI set in the
// environment), where a skip would hide a missing install.
func need(tb testing.TB, bin string) {
	tb.Helper()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%s not installed (CI must install it): %v", bin, err)
		}
		tb.Skipf("%s not installed: %v", bin, err)
	}
}

func start(dir string, args []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startOn(dir, port, args)
}

func startOn(dir string, port int, args []string) (*Server, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var conf []string
	if len(args) > 0 && !strings.HasPrefix(args[0], "--") {
		conf, args = args[:1], args[1:] // a configuration file comes first
	}
	cmd := exec.Command(Binary, append(append(conf,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--loglevel", "warning"),
		args...)...)
	// The output goes to a file (kept across a restart) for Log.
	out, err := os.OpenFile(filepath.Join(dir, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("redis-server log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("exec %s: %w", Binary, err)
	}
	s := &Server{Addr: addr, cmd: cmd, done: make(chan struct{}), dir: dir, args: append(conf, args...)}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(s.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err = ping(addr); err == nil {
			return s, nil
		}
		select {
		case <-s.done: // it failed to start, e.g. its port was taken
			return nil, fmt.Errorf("redis-server on %s exited at start", addr)
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on %s not ready: %w", addr, err)
}

// logName is the file in a server's directory that holds its output.
const logName = "redis-server.log"

// Log returns what the server printed so far, over its restarts too (at
// the log level its arguments chose: warning unless they say otherwise).
func (s *Server) Log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, logName))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Pid returns the server's process id, for tests that signal it (SIGSTOP
// freezes it: its connections stay open and nothing answers).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill ends the server with SIGKILL, as a crash would, and waits for the
// process to exit; its clients see their connections reset. The cleanup
// registered by Start then has nothing left to stop.
func (s *Server) Kill() error {
	if err := s.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill redis-server %d: %w", s.cmd.Process.Pid, err)
	}
	<-s.done // "signal: killed"
	return nil
}

// Restart starts an empty server again on the same address after Kill, as
// a supervisor would restart a crashed one (without persistence it lost
// every key). The cleanup registered by Start stops the new process.
func (s *Server) Restart() error {
	_, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return fmt.Errorf("restart redis-server: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("restart redis-server: %w", err)
	}
	ns, err := startOn(s.dir, p, s.args)
	if err != nil {
		return fmt.Errorf("restart redis-server on %s: %w", s.Addr, err)
	}
	s.cmd, s.done = ns.cmd, ns.done
	return nil
}

func (s *Server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}
