// Package sockopt holds the socket options wsgate and wsload set before a
// socket is bound, as net.Dialer and net.ListenConfig Control functions.
package sockopt

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// BindNoPort sets IP_BIND_ADDRESS_NO_PORT on a socket about to be bound to a
// source address, so bind() takes the address only and connect() picks the
// port for the whole (source, destination) pair. Without it the kernel
// reserves a port per source address at bind time, and one source address
// runs out after about 28k connections in total rather than per
// destination. It has the signature of net.Dialer.Control.
func BindNoPort(network, address string, c syscall.RawConn) error {
	return setInt(c, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, "IP_BIND_ADDRESS_NO_PORT")
}

// ReusePort sets SO_REUSEPORT on a socket about to listen, so other
// processes may listen on the same address and the kernel spreads new
// connections over them. It has the signature of net.ListenConfig.Control.
func ReusePort(network, address string, c syscall.RawConn) error {
	return setInt(c, unix.SOL_SOCKET, unix.SO_REUSEPORT, "SO_REUSEPORT")
}

// setInt sets the integer option level/opt, called name in errors, to 1
// on c's descriptor.
func setInt(c syscall.RawConn, level, opt int, name string) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, opt, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set %s: %w", name, os.NewSyscallError("setsockopt", serr))
	}
	return nil
}

// Keepalive settings of ListenKeepAlive, the values Go's net package sets
// on each accepted connection by default: first probe after 15 s idle,
// then every 15 s, 9 probes.
const (
	keepAliveIdle     = 15
	keepAliveInterval = 15
	keepAliveCount    = 9
)

// ListenKeepAlive sets TCP keepalive (SO_KEEPALIVE, TCP_KEEPIDLE,
// TCP_KEEPINTVL, TCP_KEEPCNT: 15 s, 15 s, 9) on a socket about to listen.
// Linux copies them to every connection it accepts, so a listener made
// with it and net.ListenConfig.KeepAlive < 0 gives its connections the
// keepalive Go's default would, without four setsockopt calls per accept.
// It has the signature of net.ListenConfig.Control.
func ListenKeepAlive(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = KeepAlive(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// KeepAlive sets on the socket fd the TCP keepalive ListenKeepAlive sets
// on a listener, the settings Go's dialer gives a connection by default:
// for a socket that connects, which inherits nothing.
func KeepAlive(fd int) error {
	for _, o := range [...]struct {
		level, opt, v int
		name          string
	}{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle, "TCP_KEEPIDLE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval, "TCP_KEEPINTVL"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount, "TCP_KEEPCNT"},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			return fmt.Errorf("set %s: %w", o.name, os.NewSyscallError("setsockopt", err))
		}
	}
	return nil
}
