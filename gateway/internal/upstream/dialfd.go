package upstream

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/wsgate/wsgate/internal/sockopt"
	"golang.org/x/sys/unix"
)

// ErrNoSocketDial is DialSocket's answer when it cannot dial addr itself:
// addr is not an IP address and port (a name to resolve), has a zone, or
// a test has set DialOne. The caller dials with Dial instead.
var ErrNoSocketDial = errors.New("not dialed as a bare socket")

// DialSocket starts a connection to the node at addr as Dial would, from
// the same source addresses with the same checks (fromSources), but
// returns a bare non-blocking socket (with addr parsed) whose connect may
// still be under way, for a caller that waits for it on an epoll set of
// its own: the connection never
// passes through Go's net package, which would register it with the
// runtime's poller, read its addresses back and allocate a connection
// the caller then takes apart. Errors are Dial's: a connect the kernel
// refused at once (and any later failure, seen on the socket's first
// write or read) is the node's; one wrapping ErrLocalDial the gateway's.
// The socket has Dial's options: TCP_NODELAY and Go's default keepalive.
func (d *Dialer) DialSocket(addr string) (int, netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || d.DialOne != nil || ap.Addr().Zone() != "" {
		// A zone (a link-local node, "[fe80::1%eth0]:80") names an
		// interface that sockaddr has no index for: Go's dialer
		// resolves it.
		return -1, ap, ErrNoSocketDial
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	fd, err := fromSources(d, addr, func(nd *net.Dialer) (int, error) { return connectSocket(nd, ap) })
	return fd, ap, err
}

// connectSocket opens a non-blocking socket, gives it nd's options,
// source address and Control checks, and starts its connect to ap. Errors
// are *net.OpError around an *os.SyscallError naming the call that
// failed, as Go's dialer returns them (health.LocalReason reads them).
func connectSocket(nd *net.Dialer, ap netip.AddrPort) (int, error) {
	family, network := unix.AF_INET, "tcp4"
	if ap.Addr().Is6() {
		family, network = unix.AF_INET6, "tcp6"
	}
	fail := func(call string, err error) (int, error) {
		return -1, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError(call, err)}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail("socket", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = unix.Close(fd)
		}
	}()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return fail("setsockopt", err)
	}
	if err := sockopt.KeepAlive(fd); err != nil {
		return -1, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: err}
	}
	if nd.Control != nil {
		// The source's IP_BIND_ADDRESS_NO_PORT and the node policy's
		// check, as Go's dialer runs them: before bind and connect.
		if err := nd.Control(network, ap.String(), socketConn(fd)); err != nil {
			return -1, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: err}
		}
	}
	if la, ok := nd.LocalAddr.(*net.TCPAddr); ok && la != nil {
		if err := unix.Bind(fd, sockaddr(la.AddrPort())); err != nil {
			return fail("bind", err)
		}
	}
	switch err := unix.Connect(fd, sockaddr(ap)); err {
	case nil, unix.EINPROGRESS:
	default:
		return fail("connect", err)
	}
	ok = true
	return fd, nil
}

// sockaddr is ap as a socket address.
func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
}

// socketConn is a bare socket as the syscall.RawConn a net.Dialer's
// Control function takes; only Control is used.
type socketConn int

// Control calls f with the socket.
func (c socketConn) Control(f func(fd uintptr)) error { f(uintptr(c)); return nil }

// Read is not used by Control functions.
func (socketConn) Read(func(fd uintptr) bool) error { return syscall.EINVAL }

// Write is not used by Control functions.
func (socketConn) Write(func(fd uintptr) bool) error { return syscall.EINVAL }
