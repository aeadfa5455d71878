//go:build !linux

package tunnel

import (
	"errors"
	"net"
	"net/netip"
)

// The event-driven engine exists on Linux only; elsewhere every tunnel
// runs on the stream engine.

// adopt reports false: no tunnel runs on a poller here.
func (t *Tunnel) adopt(net.Conn) bool { return false }

// tail is the event-driven engine's; a half never has one here.
type tail struct{}

// SetPollers does nothing where there is no event-driven engine.
func SetPollers(int) bool { return false }

// Pollers is 0 where there is no event-driven engine.
func Pollers() int { return 0 }

// AttachConn takes no connection where there is no event-driven engine.
func AttachConn(net.Conn, PolledConn) (any, func()) { return nil, nil }

// AttachConnBeside takes no connection where there is no event-driven
// engine.
func AttachConnBeside(net.Conn, PolledConn, []any) (any, func()) { return nil, nil }

// NodeSocket is the event-driven engine's node socket; none is made here.
type NodeSocket struct{ net.Conn }

// WatchSocket fails where there is no event-driven engine: the caller
// dials with Go's net package instead.
func WatchSocket(int, netip.AddrPort) (*NodeSocket, error) {
	return nil, errors.New("tunnel: no event-driven engine on this system")
}

// NodeSockets is 0: no NodeSocket is made here.
func NodeSockets() int { return 0 }
