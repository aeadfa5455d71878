package tunnel

import (
	"net"
	"sync/atomic"
	"time"
)

// A client the gateway cut (a frame over the limit, broken framing, over
// its rate) still sends: its tunnel reads on and drops what it sends, and
// once the gateway's close frame has gone out and the node's side is done,
// the tunnel ends. Closing the client's socket then, with bytes of the
// client's arriving or unread, makes the kernel answer with a reset and
// throw away what it has not yet sent: the end of the node's frames and
// the close frame that says why, for a client that reads slowly. So the
// socket lingers instead, as nginx's lingering_close does: it is shut for
// writing (the close frame and a FIN go out behind what is queued) and
// read and dropped until the client closes too, the close deadline the
// tunnel was under passes, or lingerBytes have come; then it is closed.
// A lingering socket still holds its place in the listener's limits (the
// client connection is closed last), and at most lingerMax linger at once:
// past that a cut client's socket is closed at once, as before. A client
// with no socket of its own, a stream of an HTTP/2 connection, never
// lingers: its close is a frame on a connection that stays, which resets
// nothing, so it takes no place of lingerMax.

// lingerBytes is the most a lingering socket reads before it is closed.
const lingerBytes = 64 << 10

// lingerMax bounds the sockets lingering at once in the process
// (defaultLingerMax; tests lower it).
var lingerMax = func() *atomic.Int32 {
	var n atomic.Int32
	n.Store(defaultLingerMax)
	return &n
}()

const defaultLingerMax = 1024

// lingering counts the sockets lingering now.
var lingering atomic.Int32

// clientLingers reports whether the client's socket lingers when the
// tunnel closes its connections, and until when; a true answer holds a
// place of lingerMax, which linger gives back. It lingers when the gateway
// cut the client and still read it, and wrote the client its close frame
// (none is still being written), and the close deadline is ahead, and
// the client has a socket of its own to shut (ownSocket). Abort never
// asks.
func (t *Tunnel) clientLingers() (time.Time, bool) {
	if !ownSocket(t.client) {
		return time.Time{}, false
	}
	h := &t.toNode
	h.mu.Lock()
	cut := h.broken
	h.mu.Unlock()
	c := &t.toClient
	c.mu.Lock()
	told := c.sentClose && !c.dstFailed && !c.writing
	c.mu.Unlock()
	until := t.closeDeadline()
	if !cut || !told || until.IsZero() || !time.Now().Before(until) {
		return time.Time{}, false
	}
	if lingering.Add(1) > lingerMax.Load() {
		lingering.Add(-1)
		return time.Time{}, false
	}
	return until, true
}

// linger shuts sock, the client's TCP socket, for writing, reads and drops
// what comes until the client closes, until passes or lingerBytes came,
// then calls closeAll, which closes sock and what it carries. It gives
// back the place clientLingers took.
func linger(sock net.Conn, until time.Time, closeAll func()) {
	defer lingering.Add(-1)
	defer closeAll()
	if cw, ok := sock.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = sock.SetReadDeadline(until)
	var buf [512]byte
	for n := 0; n < lingerBytes; {
		k, err := sock.Read(buf[:])
		if err != nil {
			return
		}
		n += k
	}
}

// ownSocket reports whether c is, or runs over, a socket of its own that
// a linger can shut for writing (a TCP connection); a stream of an HTTP/2
// connection is not.
func ownSocket(c net.Conn) bool {
	_, ok := plainSocket(c).(interface{ CloseWrite() error })
	return ok
}

// plainSocket is the connection under c's TLS layers, c itself when it has
// none: what a lingering client socket is read on.
func plainSocket(c net.Conn) net.Conn {
	for range 4 { // a TLS connection over a wrapper over the socket, at most
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = nc.NetConn()
	}
	return c
}
