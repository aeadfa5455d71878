package upstream

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

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

// TestDialSocketOptions pins the options DialSocket gives its socket,
// those Go's dialer gives a connection (TCP_NODELAY, keepalive at 15 s,
// 15 s, 9), and a socket that is non-blocking and close-on-exec. (Its
// sources, node policy and local failures are held to Dial's rules in
// TestDialerBindsNoPortAndSpreads, TestDialerRealUnavailableSource and
// TestDialerHoldsToPolicy.)
func TestDialSocketOptions(t *testing.T) {
	node := newNodeListener(t)
	d, err := newDialer("p", nil, 2*time.Second, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fd, remote, err := d.DialSocket(node.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
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
