package upgrade

import (
	"net"
	"sync"
	"time"
)

// ReadBufferSize is fasthttp's per-connection read buffer on the client
// listener, which bounds the request headers a client may send and the
// bytes Detach may find buffered behind a request.
const ReadBufferSize = 8 << 10

// detachBufs holds Detach's read buffers.
var detachBufs = sync.Pool{New: func() any { return new([1024]byte) }}

// Detach returns the connection under fasthttp's hijacked connection, with
// any bytes the client sent right behind its request (still in fasthttp's
// read buffer). The buffer is read out under an expired deadline, which
// returns buffered bytes and never touches the socket. On the TLS listener
// the connection is the *tls.Conn, never the socket under it: the tunnel
// reads and writes plaintext through it, and the records it has already
// taken off the socket stay in it, to be read there (a read under an
// expired deadline drains what it has decrypted or can decrypt without the
// socket, and its timeout leaves the connection usable).
func Detach(c net.Conn) (net.Conn, []byte) {
	u, ok := c.(interface{ UnsafeConn() net.Conn })
	if !ok {
		return c, nil
	}
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return c, nil
	}
	var pending []byte
	buf := detachBufs.Get().(*[1024]byte) // a buffer on the stack would escape through Read
	for range ReadBufferSize/len(buf) + 2 {
		n, err := c.Read(buf[:])
		pending = append(pending, buf[:n]...)
		if err != nil {
			break
		}
	}
	detachBufs.Put(buf)
	raw := u.UnsafeConn()
	_ = raw.SetReadDeadline(time.Time{})
	return raw, pending
}

// LingerClose half-closes c and reads what the peer still sends until it
// closes too, or until the deadline until at the latest, so the close frame
// just written is not lost to a reset. The caller closes c.
func LingerClose(c net.Conn, until time.Time) {
	raw, _ := Detach(c)
	// Detach cleared the read deadline: a client that never closes must
	// not keep the socket and this goroutine.
	_ = raw.SetDeadline(until)
	if tc, ok := raw.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	var buf [512]byte
	for range 64 {
		if _, err := raw.Read(buf[:]); err != nil {
			return
		}
	}
}
