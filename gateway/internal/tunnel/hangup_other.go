//go:build !linux

package tunnel

import (
	"net"
	"syscall"
)

// hangUpSocket returns nil: srcHungUp never probes a socket here.
func hangUpSocket(net.Conn) syscall.RawConn { return nil }

// srcHungUp reports false: without POLLRDHUP a hang-up behind unread bytes
// cannot be seen without reading, and a stalled write then ends by the
// write timeout or the close deadline only.
func (*goState) srcHungUp() bool { return false }
