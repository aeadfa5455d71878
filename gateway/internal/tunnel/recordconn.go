package tunnel

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/pollread"
	"github.com/wsgate/wsgate/internal/tlsrecord"
)

// RecordConn is a client's TLS 1.3 connection whose record layer was
// taken from crypto/tls after its handshake (tlsrecord.Capture.Take): the
// gateway's TLS listener hands it to fasthttp, which reads the request and
// writes the answer through it, blocking, as through a *tls.Conn. A
// tunnel over it (New) takes its Session and socket and runs it on a
// poller like a plain one (see recordClient): no goroutine and no buffer
// while idle. Where the poller cannot run it (a TLS node), the goroutine
// engine reads and writes it as here.
//
// Its socket is a TLSSocket, so that a write to a client that pauses
// reading waits in probes below the record layer, as under crypto/tls.
// One Read and one Write may run at once, the two side by side.
type RecordConn struct {
	sock  *TLSSocket
	state tls.ConnectionState

	rmu   sync.Mutex // one Read at a time; guards plain, pbuf, rerr
	pbuf  *[]byte    // the pooled buffer plain lies in; nil when plain is empty
	plain []byte     // application data opened and not read yet
	rerr  error      // the end of the client's stream, returned by every later Read

	wmu sync.Mutex // one Write at a time: records leave in the order sealed

	smu   sync.Mutex         // guards what follows: Open and Seal run from a Read and a Write
	s     *tlsrecord.Session // nil once a tunnel took it
	fault error              // the session's failure in a read, the alert Close sends
}

// NewRecordConn returns the connection over sock whose handshake, state,
// gave the session s.
func NewRecordConn(sock *TLSSocket, state tls.ConnectionState, s *tlsrecord.Session) *RecordConn {
	return &RecordConn{sock: sock, state: state, s: s}
}

// ConnectionState is the handshake's state (fasthttp's TLSConnectionState
// and the auth plugins' TLS information read it).
func (c *RecordConn) ConnectionState() tls.ConnectionState { return c.state }

// Handshake does nothing: the handshake is done.
func (c *RecordConn) Handshake() error { return nil }

// NetConn returns the socket under the records, a TLSSocket.
func (c *RecordConn) NetConn() net.Conn { return c.sock }

// recordBufs holds Read's buffers: the ciphertext read (bufSize) and the
// data opened from it, which may finish a record read in part before.
var (
	cipherBufs = pollread.NewPool(bufSize)
	plainBufs  = pollread.NewPool(bufSize + tlsrecord.MaxPlaintext + 512)
)

// errRecordsTaken is what the connection's reads and writes return once a
// tunnel took its session.
var errRecordsTaken = errors.New("tunnel: the connection's records are run by a tunnel")

// Read reads the client's application data. A read that times out
// leaves the connection usable (upgrade.Detach reads under an expired
// deadline).
func (c *RecordConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.plain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		cb := cipherBufs.Get()
		n, err := c.sock.Read(*cb)
		c.smu.Lock()
		if c.s == nil {
			c.smu.Unlock()
			cipherBufs.Put(cb)
			return 0, errRecordsTaken
		}
		pb := plainBufs.Get()
		plain, oerr := c.s.Open((*pb)[:0], (*cb)[:n])
		if oerr != nil && !errors.Is(oerr, io.EOF) {
			c.fault = oerr
		}
		c.smu.Unlock()
		cipherBufs.Put(cb)
		if len(plain) > 0 {
			c.pbuf, c.plain = pb, plain
		} else {
			plainBufs.Put(pb)
		}
		switch {
		case oerr != nil:
			c.rerr = oerr
		case err != nil && len(c.plain) == 0:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, err // not final
			}
			c.rerr = err
		}
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	if len(c.plain) == 0 {
		plainBufs.Put(c.pbuf)
		c.pbuf, c.plain = nil, nil
	}
	return n, nil
}

// sealChunk is the most application data one Write seals before writing.
const sealChunk = 4 * tlsrecord.MaxPlaintext

var sealBufs = pollread.NewPool(tlsrecord.SealedLen(sealChunk))

// Write seals p into records and writes them to the socket.
func (c *RecordConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	buf := sealBufs.Get()
	defer sealBufs.Put(buf)
	n := 0
	for first := true; first || n < len(p); first = false {
		chunk := p[n:min(len(p), n+sealChunk)]
		c.smu.Lock()
		if c.s == nil {
			c.smu.Unlock()
			return n, errRecordsTaken
		}
		out, err := c.s.Seal((*buf)[:0], chunk)
		c.smu.Unlock()
		if err != nil {
			return n, err
		}
		if _, err := c.sock.Write(out); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// CloseWrite sends close_notify and shuts the socket's sending side.
func (c *RecordConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.smu.Lock()
	var out []byte
	if c.s != nil {
		out = c.s.AppendClose(nil, nil)
	}
	c.smu.Unlock()
	if len(out) > 0 {
		if _, err := c.sock.Write(out); err != nil {
			return err
		}
	}
	if cw, ok := c.sock.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close sends close_notify, or the alert of the session's failure, if
// the socket takes it at once and no write is in flight (a record may be
// half sent), and closes the socket.
func (c *RecordConn) Close() error {
	c.sock.closing.Store(true) // a write never waits from here
	if c.wmu.TryLock() {
		c.smu.Lock()
		var out []byte
		if c.s != nil {
			out = c.s.AppendClose(nil, c.fault)
		}
		c.smu.Unlock()
		if len(out) > 0 {
			_, _ = c.sock.Write(out)
		}
		c.wmu.Unlock()
	}
	return c.sock.Conn.Close()
}

// LocalAddr is the socket's.
func (c *RecordConn) LocalAddr() net.Addr { return c.sock.LocalAddr() }

// RemoteAddr is the socket's (a PROXY header's client address).
func (c *RecordConn) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

// SetDeadline sets the socket's read and write deadlines.
func (c *RecordConn) SetDeadline(t time.Time) error { return c.sock.SetDeadline(t) }

// SetReadDeadline sets the socket's read deadline.
func (c *RecordConn) SetReadDeadline(t time.Time) error { return c.sock.SetReadDeadline(t) }

// SetWriteDeadline sets the socket's write deadline.
func (c *RecordConn) SetWriteDeadline(t time.Time) error { return c.sock.SetWriteDeadline(t) }

// takeRecords hands the session, the socket under the TLSSocket (whose
// Close frees what the connection holds) and the data opened and not
// read yet to a tunnel that runs the connection on a poller; nil when
// the connection has ended or is no longer this one's to give. Nothing
// may be in flight on the connection.
func (c *RecordConn) takeRecords() (*tlsrecord.Session, net.Conn, []byte) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.smu.Lock()
	defer c.smu.Unlock()
	if c.s == nil || c.rerr != nil || c.fault != nil {
		return nil, nil, nil
	}
	s := c.s
	c.s = nil
	plain := append([]byte(nil), c.plain...)
	if c.pbuf != nil {
		plainBufs.Put(c.pbuf)
		c.pbuf, c.plain = nil, nil
	}
	return s, c.sock.Conn, plain
}

// HasRecords reports whether c is a client's TLS connection whose records
// a tunnel can run on a poller (a RecordConn, or carrying one).
func HasRecords(c net.Conn) bool { return recordConnOf(c) != nil }

// recordConnOf returns the RecordConn c is or carries (the TLS listener's
// connection wraps one), or nil.
func recordConnOf(c net.Conn) *RecordConn {
	switch v := c.(type) {
	case *RecordConn:
		return v
	case interface{ RecordConn() *RecordConn }:
		return v.RecordConn()
	}
	return nil
}

// recordClient is a tunnel's client connection (Tunnel.client) when the
// tunnel runs its TLS records on a poller: the socket's connection, whose
// Close frees what the connection holds (its place in the limits), and
// the record layer. The RecordConn it came from, crypto/tls's connection
// and their buffers are not kept. Its fields are the poller's.
type recordClient struct {
	net.Conn
	s *tlsrecord.Session
	// pending is the data opened before the tunnel and not read, until
	// New hands it to Start.
	pending []byte
	// end is how the client's stream ended (io.EOF after close_notify,
	// the session's failure), returned by the read after the data before
	// it.
	end error
	// cut is set when a write to the client gave up inside a record: no
	// record may follow it.
	cut bool
}

// NetConn returns the socket's connection (see ownSocket).
func (r *recordClient) NetConn() net.Conn { return r.Conn }

// takeRecords makes t's client the records and socket of rc, for the
// poller; false when rc has none to give.
func (t *Tunnel) takeRecords(rc *RecordConn) bool {
	s, sock, plain := rc.takeRecords()
	if s == nil {
		return false
	}
	s.Release() // made again by the first record either way
	t.client = &recordClient{Conn: sock, s: s, pending: plain}
	return true
}

// giveBackRecords undoes takeRecords, orig being t's client before it:
// the tunnel runs on goroutines.
func (t *Tunnel) giveBackRecords(rc *RecordConn, orig net.Conn) {
	r := t.client.(*recordClient)
	rc.smu.Lock()
	rc.s = r.s
	rc.smu.Unlock()
	if len(r.pending) > 0 {
		pb := plainBufs.Get()
		rc.pbuf, rc.plain = pb, append((*pb)[:0], r.pending...)
	}
	t.client = orig
}

// records returns t's client's record layer when the poller runs it.
func (t *Tunnel) records() *recordClient {
	r, _ := t.client.(*recordClient)
	return r
}
