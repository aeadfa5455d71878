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
