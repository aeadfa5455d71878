package edge

import (
	"context"
	"net"
	"syscall"

	"github.com/wsgate/wsgate/internal/sockopt"
)

// ListenReusePort opens a TCP listener with SO_REUSEPORT set, so other
// processes may listen on the same address.
func ListenReusePort(addr string) (net.Listener, error) { return ListenTCP(addr, true) }

// ListenTCP opens a TCP listener, with SO_REUSEPORT if reusePort. TCP
// keepalive is set on the listening socket (sockopt.ListenKeepAlive), which
// every accepted connection inherits, instead of four setsockopt calls on
// each accept: the settings are Go's defaults either way.
func ListenTCP(addr string, reusePort bool) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: func(network, address string, c syscall.RawConn) error {
		if reusePort {
			if err := sockopt.ReusePort(network, address, c); err != nil {
				return err
			}
		}
		return sockopt.ListenKeepAlive(network, address, c)
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
