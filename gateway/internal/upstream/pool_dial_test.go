package upstream

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/sys/unix"
)

// quietLog is a logger that writes nowhere.
func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// waitUntil polls cond until it holds, failing the test after 10s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nodeListener is a node on loopback that records the address each
// connection comes from, and closes it.
type nodeListener struct {
	ln    net.Listener
	froms chan string
}

func newNodeListener(t *testing.T) *nodeListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &nodeListener{ln: ln, froms: make(chan string, 64)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.froms <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return n
}

func (n *nodeListener) addr() string { return n.ln.Addr().String() }

// from waits for the next connection the node accepted and returns the
// address it came from.
func (n *nodeListener) from(t *testing.T) string {
	t.Helper()
	select {
	case ip := <-n.froms:
		return ip
	case <-time.After(10 * time.Second):
		t.Fatal("the node accepted no connection within 10s")
		return ""
	}
}

// dialCounts records what a dialer counts, by reason.
type dialCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *dialCounts) count(pool, node, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *dialCounts) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

// TestDialerBindsNoPortAndSpreads pins that a dial from a source address
// sets IP_BIND_ADDRESS_NO_PORT (it did not: binding with port 0 took an
// ephemeral port at bind, so one source address held ~28k connections
// to all nodes together) and rotates over every configured source, on
// both of the dialer's ways (Dial and DialSocket).
func TestDialerBindsNoPortAndSpreads(t *testing.T) {
	for _, way := range dialWays {
		t.Run(way.name, func(t *testing.T) {
			node := newNodeListener(t)
			d, err := newDialer("p", []string{"127.0.0.2", "127.0.0.3"}, 2*time.Second, quietLog(), nil)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for range 4 {
				c, err := way.dial(t, d, node.addr())
				if err != nil {
					t.Fatal(err)
				}
				if v, err := c.getsockopt(unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT); err != nil || v != 1 {
					t.Errorf("IP_BIND_ADDRESS_NO_PORT = %d (%v), want 1", v, err)
				}
				c.close()
				seen[node.from(t)]++
			}
			if seen["127.0.0.2"] != 2 || seen["127.0.0.3"] != 2 {
				t.Fatalf("the node saw connections from %v, want 2 from each of 127.0.0.2 and 127.0.0.3", seen)
			}
		})
	}
}

// dialed is a connection one of the dialer's ways opened, connected.
type dialed struct {
	fd    int
	close func()
}

// getsockopt reads an integer option of the connection's socket.
func (c dialed) getsockopt(level, opt int) (int, error) { return unix.GetsockoptInt(c.fd, level, opt) }

// dialWays are the Dialer's two ways to dial, for the tests that hold
// both to the same rules.
var dialWays = []struct {
	name string
	dial func(t *testing.T, d *Dialer, addr string) (dialed, error)
}{
	{"Dial", func(t *testing.T, d *Dialer, addr string) (dialed, error) {
		c, err := d.Dial(addr)
		if err != nil {
			return dialed{}, err
		}
		f, err := c.(*net.TCPConn).File() // a duplicate, for getsockopt
		if err != nil {
			t.Fatal(err)
		}
		return dialed{fd: int(f.Fd()), close: func() { _ = f.Close(); _ = c.Close() }}, nil
	}},
	{"DialSocket", func(t *testing.T, d *Dialer, addr string) (dialed, error) {
		fd, _, err := d.DialSocket(addr)
		if err != nil {
			return dialed{}, err
		}
		if err := connected(t, fd); err != nil {
			t.Fatal(err)
		}
		return dialed{fd: fd, close: func() { _ = unix.Close(fd) }}, nil
	}},
}

// TestDialerLocalErrors pins that a dial failing on the gateway's side is
// told apart from a node's failure (it was not: every dial error counted
// against the node): counted by reason, wrapped in ErrLocalDial, and
// retried from the next source address only when another source can help
// (no port or no such address there), not when the process is out of
// descriptors or memory.
func TestDialerLocalErrors(t *testing.T) {
	node := newNodeListener(t)
	sysErr := func(call string, e syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError(call, e)}
	}
	cases := []struct {
		name     string
		fail     error // what the first source's dial returns
		reason   string
		fallback bool // the second source is tried
	}{
		{"no port", sysErr("connect", syscall.EADDRNOTAVAIL), health.ReasonNoSourcePort, true},
		{"no address", sysErr("bind", syscall.EADDRNOTAVAIL), health.ReasonNoSourceAddr, true},
		{"EMFILE", sysErr("socket", syscall.EMFILE), health.ReasonNoDescriptors, false},
		{"ENFILE", sysErr("socket", syscall.ENFILE), health.ReasonNoDescriptors, false},
		{"ENOBUFS", sysErr("connect", syscall.ENOBUFS), health.ReasonNoMemory, false},
		{"ENOMEM", sysErr("socket", syscall.ENOMEM), health.ReasonNoMemory, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var counts dialCounts
			d, err := newDialer("p", []string{"127.0.0.2", "127.0.0.3"}, 2*time.Second, quietLog(), counts.count)
			if err != nil {
				t.Fatal(err)
			}
			real := func(nd *net.Dialer, addr string) (net.Conn, error) { return nd.Dial("tcp", addr) }
			calls := 0
			d.DialOne = func(nd *net.Dialer, addr string) (net.Conn, error) {
				calls++
				if nd.LocalAddr.(*net.TCPAddr).IP.String() == "127.0.0.2" {
					return nil, tc.fail
				}
				return real(nd, addr)
			}
			d.next.Store(1) // the next dial starts at 127.0.0.2
			c, err := d.Dial(node.addr())
			if counts.get(tc.reason) != 1 {
				t.Errorf("counted %v, want one %s", counts.n, tc.reason)
			}
			if tc.fallback {
				if err != nil {
					t.Fatalf("dial: %v, want a connection from the second source", err)
				}
				_ = c.Close()
				if from := node.from(t); from != "127.0.0.3" {
					t.Fatalf("the node saw %s, want 127.0.0.3", from)
				}
				return
			}
			if !errors.Is(err, ErrLocalDial) || calls != 1 {
				t.Fatalf("dial: %v after %d tries, want ErrLocalDial after 1", err, calls)
			}
		})
	}

	// A node's own failure is not local: nothing counted, not retried.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	_ = dead.Close()
	var counts dialCounts
	d, _ := newDialer("p", []string{"127.0.0.2", "127.0.0.3"}, 2*time.Second, quietLog(), counts.count)
	if _, err := d.Dial(addr); err == nil || errors.Is(err, ErrLocalDial) || len(counts.n) != 0 {
		t.Fatalf("dial to a closed port: %v, counted %v; want a node error, nothing counted", err, counts.n)
	}
}

// TestDialerRealUnavailableSource pins the classification on a real
// EADDRNOTAVAIL: a source address that is not on the host fails at bind,
// is counted as no_source_addr, and the next source carries the dial.
func TestDialerRealUnavailableSource(t *testing.T) {
	src := testproc.UnusedSource(t)
	for _, way := range dialWays {
		t.Run(way.name, func(t *testing.T) {
			node := newNodeListener(t)
			var counts dialCounts
			d, err := newDialer("p", []string{src, "127.0.0.2"}, 2*time.Second, quietLog(), counts.count)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // one dial starts at each source
				c, err := way.dial(t, d, node.addr())
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				c.close()
				if from := node.from(t); from != "127.0.0.2" {
					t.Fatalf("the node saw %s, want 127.0.0.2", from)
				}
			}
			if n := counts.get(health.ReasonNoSourceAddr); n != 1 {
				t.Fatalf("counted %v, want one %s", counts.n, health.ReasonNoSourceAddr)
			}
			only, _ := newDialer("p", []string{src}, 2*time.Second, quietLog(), counts.count)
			_, err = way.dial(t, only, node.addr())
			if !errors.Is(err, ErrLocalDial) || !errors.Is(err, syscall.EADDRNOTAVAIL) {
				t.Fatalf("dial from %s alone: %v, want ErrLocalDial with EADDRNOTAVAIL", src, err)
			}
		})
	}
}

// logLines splits what buf holds into lines.
func logLines(buf *testproc.Buffer) []string {
	return strings.Split(strings.TrimSpace(buf.String()), "\n")
}

// TestDialLogThrottled pins that a flood of local dial failures toward one
// node writes one line at once and one more with the count of the rest,
// not a line per failure, and that each node has its own lines.
func TestDialLogThrottled(t *testing.T) {
	buf := &testproc.Buffer{} // safe for the dial log's timer
	l := &dialLog{log: slog.New(slog.NewTextHandler(buf, nil)), pool: "p", nodes: map[string]*nodeDialLog{}}
	err := os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)
	for range 50 {
		l.failed("127.0.0.1:1", health.ReasonNoSourcePort, err)
	}
	l.failed("127.0.0.1:2", health.ReasonNoSourcePort, err)
	waitUntil(t, func() bool { return len(logLines(buf)) >= 3 })
	lines := logLines(buf)
	want := []string{"node=127.0.0.1:1 reason=no_source_port", "node=127.0.0.1:2 reason=no_source_port", "node=127.0.0.1:1 reason=no_source_port"}
	counts := []string{"errors=1", "errors=1", "errors=49"}
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, ln := range lines {
		if !strings.Contains(ln, want[i]) || !strings.Contains(ln, counts[i]) {
			t.Errorf("line %d: %s\nwant %s ... %s", i, ln, want[i], counts[i])
		}
	}
}
