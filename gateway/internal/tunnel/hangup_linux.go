package tunnel

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// hangUpSocket is the socket srcHungUp probes for src: the one under a
// TLS connection (a *tls.Conn has no descriptor of its own), nil if none.
func hangUpSocket(src net.Conn) syscall.RawConn { return rawSocket(src) }

// srcHungUp reports whether src's peer has shut down its side or the
// connection failed, without reading: the kernel knows it (POLLRDHUP) even
// while unread bytes sit in front of the end of the stream.
func (g *goState) srcHungUp() bool {
	if g.srcRaw == nil {
		return false
	}
	hung := false
	_ = g.srcRaw.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			hung = p[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hung
}
