package upstream

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/sys/unix"
)

// connected waits for fd's connect to finish and returns its outcome.
func connected(t *testing.T, fd int) error {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if _, err := unix.Poll(pfd, 10_000); err != nil {
		t.Fatal(err)
	}
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		t.Fatal(err)
	}
	if v != 0 {
		return syscall.Errno(v)
	}
	return nil
}

// TestDialSocketSourcesAndOptions pins DialSocket against Dial: the same
// rotation over source addresses with IP_BIND_ADDRESS_NO_PORT, and the
// options Go's dialer gives its connections (TCP_NODELAY, keepalive at
// 15 s, 15 s, 9).
func TestDialSocketSourcesAndOptions(t *testing.T) {
	node := newNodeListener(t)
	d, err := newDialer("p", []string{"127.0.0.2", "127.0.0.3"}, 2*time.Second, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 4 {
		fd, remote, err := d.DialSocket(node.addr())
		if err != nil {
			t.Fatal(err)
		}
		if remote.String() != node.addr() {
			t.Errorf("remote %v, want %s", remote, node.addr())
		}
		if err := connected(t, fd); err != nil {
			t.Fatal(err)
		}
		for _, o := range []struct {
			level, opt, want int
			name             string
		}{
			{unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1, "IP_BIND_ADDRESS_NO_PORT"},
			{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1, "TCP_NODELAY"},
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15, "TCP_KEEPIDLE"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15, "TCP_KEEPINTVL"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9, "TCP_KEEPCNT"},
		} {
			if v, err := unix.GetsockoptInt(fd, o.level, o.opt); err != nil || v != o.want {
				t.Errorf("%s = %d (%v), want %d", o.name, v, err, o.want)
			}
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Errorf("socket not non-blocking: flags %#x, %v", fl, err)
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
			t.Errorf("socket not close-on-exec: flags %#x, %v", fl, err)
		}
		_ = unix.Close(fd)
		seen[node.from(t)]++
	}
	if seen["127.0.0.2"] != 2 || seen["127.0.0.3"] != 2 {
		t.Fatalf("the node saw connections from %v, want 2 from each of 127.0.0.2 and 127.0.0.3", seen)
	}
}

// TestDialSocketUnavailableSource pins DialSocket's local failures as
// Dial's (TestDialerRealUnavailableSource): a source address the host
// does not have is counted and the next source tried; alone, it is
// ErrLocalDial.
func TestDialSocketUnavailableSource(t *testing.T) {
	src := testproc.UnusedSource(t)
	node := newNodeListener(t)
	var counts dialCounts
	d, err := newDialer("p", []string{src, "127.0.0.2"}, 2*time.Second, quietLog(), counts.count)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		fd, _, err := d.DialSocket(node.addr())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if err := connected(t, fd); err != nil {
			t.Fatal(err)
		}
		_ = unix.Close(fd)
		if from := node.from(t); from != "127.0.0.2" {
			t.Fatalf("the node saw %s, want 127.0.0.2", from)
		}
	}
	if n := counts.get(health.ReasonNoSourceAddr); n != 1 {
		t.Fatalf("counted %v, want one %s", counts.n, health.ReasonNoSourceAddr)
	}
	only, _ := newDialer("p", []string{src}, 2*time.Second, quietLog(), counts.count)
	if _, _, err := only.DialSocket(node.addr()); !errors.Is(err, ErrLocalDial) || !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("dial from %s alone: %v, want ErrLocalDial with EADDRNOTAVAIL", src, err)
	}
}

// TestDialSocketHoldsToPolicy pins the node policy on DialSocket, with
// and without source addresses: a refused address is never connected to.
func TestDialSocketHoldsToPolicy(t *testing.T) {
	refused, accepts := testproc.CountingListener(t, "127.0.0.1")
	allowed, _ := testproc.CountingListener(t, "127.0.0.2")
	policy := NewNodePolicy(conf.Discovery{Kind: "dns", Allow: []string{"127.0.0.2/32"}})
	for _, sources := range [][]string{nil, {"127.0.0.5"}} {
		d, err := newDialer("p", sources, 2*time.Second, quietLog(), nil)
		if err != nil {
			t.Fatal(err)
		}
		d.holdTo(policy)
		fd, _, err := d.DialSocket(allowed.Addr().String())
		if err != nil {
			t.Fatalf("sources %v: allowed address: %v", sources, err)
		}
		if err := connected(t, fd); err != nil {
			t.Fatal(err)
		}
		_ = unix.Close(fd)
		var re *refusedAddrError
		if _, _, err := d.DialSocket(refused.Addr().String()); !errors.As(err, &re) || errors.Is(err, ErrLocalDial) {
			t.Fatalf("sources %v: refused address dialed: %v", sources, err)
		}
	}
	if n := accepts.Load(); n != 0 {
		t.Fatalf("the refused address accepted %d connections", n)
	}
}

// TestDialSocketDeclines pins when DialSocket leaves the dial to Dial: a
// host name, which needs resolving, and a dialer whose DialOne a test
// set.
func TestDialSocketDeclines(t *testing.T) {
	d, err := newDialer("p", nil, 2*time.Second, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.DialSocket("localhost:80"); !errors.Is(err, ErrNoSocketDial) {
		t.Fatalf("host name: %v, want ErrNoSocketDial", err)
	}
	d.DialOne = func(*net.Dialer, string) (net.Conn, error) { return nil, errors.New("injected") }
	if _, _, err := d.DialSocket("127.0.0.1:80"); !errors.Is(err, ErrNoSocketDial) {
		t.Fatalf("DialOne set: %v, want ErrNoSocketDial", err)
	}
}
