package tunnel

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clientAcked returns how many bytes the client's TCP stack has
// acknowledged so far (TCP_INFO's tcpi_bytes_acked), and false when that
// cannot be read: no TCP socket under the client's connection, or the
// tunnel's sockets are closed. A client whose application reads frees its
// receive window and acknowledges more; one that reads nothing, or has
// vanished, acknowledges nothing once its receive buffer is full (until
// then its stack acknowledges what the buffer has room for). On the
// event-driven engine it is called on the poller only.
func (t *Tunnel) clientAcked() (uint64, bool) { return t.clientCount(bytesAcked) }

// clientWritten returns how many bytes have been written to the client's
// socket so far, as its TCP stack counts them: those the client
// acknowledged and those still in the send queue. It is called by the
// writer of the node→client half, right after a write.
func (t *Tunnel) clientWritten() (uint64, bool) { return t.clientCount(bytesWritten) }

// clientCount returns count of the client's socket, false when there is
// none or the tunnel's sockets are closed.
func (t *Tunnel) clientCount(count func(fd uintptr) (uint64, bool)) (uint64, bool) {
	if t.poller() != nil {
		if t.fdsClosed() {
			return 0, false
		}
		return count(uintptr(t.clientFD))
	}
	raw := rawSocket(t.client)
	if raw == nil {
		return 0, false
	}
	var n uint64
	ok := false
	if err := raw.Control(func(fd uintptr) { n, ok = count(fd) }); err != nil {
		return 0, false
	}
	return n, ok
}

// bytesAcked reads tcpi_bytes_acked of the TCP socket fd, into a struct
// on the stack (unix.GetsockoptTCPInfo allocates one per call, and the
// poller asks once a pong timeout for every pinged client). A kernel
// older than the field (4.1) leaves it 0: no client then counts as
// taking bytes.
func bytesAcked(fd uintptr) (uint64, bool) {
	var info unix.TCPInfo
	size := uint32(unsafe.Sizeof(info))
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
	if e != 0 {
		return 0, false
	}
	return info.Bytes_acked, true
}

// bytesWritten returns the bytes written to the TCP socket fd so far:
// tcpi_bytes_acked plus the send queue (SIOCOUTQ: bytes not yet
// acknowledged, sent or not). An acknowledgement processed between the
// two reads would make the sum short by what it acknowledged, so the
// reads are repeated until bytes_acked stands still across one (a few
// times at most; then the sum is a lower bound).
func bytesWritten(fd uintptr) (uint64, bool) {
	acked, ok := bytesAcked(fd)
	if !ok {
		return 0, false
	}
	var sum uint64
	for range 4 {
		var queued int32
		_, _, e := unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCOUTQ, uintptr(unsafe.Pointer(&queued)))
		if e != 0 || queued < 0 {
			return 0, false
		}
		sum = acked + uint64(queued)
		again, ok := bytesAcked(fd)
		if !ok {
			return 0, false
		}
		if again == acked {
			break
		}
		acked = again
	}
	return sum, true
}

// rawSocket returns the socket under c, looking through a TLS connection
// (NetConn) to the connection it runs on; nil when there is none.
func rawSocket(c net.Conn) syscall.RawConn {
	for range 4 { // a TLS connection over a wrapper over the socket, at most
		if sc, ok := c.(syscall.Conn); ok {
			raw, err := sc.SyscallConn()
			if err != nil {
				return nil
			}
			return raw
		}
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = nc.NetConn()
	}
	return nil
}
