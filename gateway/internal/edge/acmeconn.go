package edge

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/internal/tlsrecord"
)

// RecordMetrics counts, once per TLS handshake done, who runs the
// connection's records from then on: "wsgate" (a TLS 1.3 connection whose
// record layer was taken from crypto/tls, which a tunnel runs on a poller)
// or "crypto_tls" (TLS 1.2, or a handshake the record layer could not be
// taken after: such a tunnel runs on goroutines), with the reason
// ("tls13", "tls12", "tls11", "tls10", "other"). A Listener's Metrics
// that implements it is told.
type RecordMetrics interface {
	TLSRecords(layer, reason string)
}

// serverConn is a client's connection as the TLS listener hands it over:
// crypto/tls's server connection over a tlsrecord.Capture, whose record
// layer is taken once the handshake is done (a TLS 1.3 connection: from
// then on reads and writes go through a tunnel.RecordConn, which a
// tunnel runs on a poller), or left to crypto/tls (TLS 1.2).
//
// Before that, a connection whose handshake negotiated "acme-tls/1" ends
// at once. Such a handshake is an ACME CA's tls-alpn-01 validation: the
// CA has seen the certificate once the handshake is done, and the
// connection is for nothing else (RFC 8737 section 3). It was not asked
// for a client certificate either (Certificates.SetManaged), so it must
// never reach HTTP.
//
// The check runs before the first byte read or written (the handshake
// runs there too, or in Handshake, which fasthttp calls first), so no
// request is read and no answer written over such a connection. Like a
// *tls.Conn, it takes one Read and one Write at a time, the two side by
// side.
type serverConn struct {
	*tls.Conn
	capture *tlsrecord.Capture
	sock    *tunnel.TLSSocket
	metrics Metrics

	mu      sync.Mutex         // held by check until checked
	rec     *tunnel.RecordConn // the records, when taken; set before checked
	checked atomic.Bool        // the handshake is done and did not negotiate acme-tls/1
}

// newServerConn returns the TLS server connection over sock for config
// (from tlsrecord.ServerConfig).
func newServerConn(sock *tunnel.TLSSocket, config *tls.Config, m Metrics) *serverConn {
	cc := tlsrecord.NewCapture(sock)
	return &serverConn{Conn: tls.Server(cc, config), capture: cc, sock: sock, metrics: m}
}

// Handshake runs the handshake and the check; fasthttp calls it first.
func (c *serverConn) Handshake() error { return c.check() }

// Read reads application data, once the handshake is done and checked.
func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if c.rec != nil {
		return c.rec.Read(b)
	}
	return c.Conn.Read(b)
}

// Write writes application data, once the handshake is done and checked.
func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if c.rec != nil {
		return c.rec.Write(b)
	}
	return c.Conn.Write(b)
}

// Close sends close_notify (if the socket takes it at once, over taken
// records) and closes the connection.
func (c *serverConn) Close() error {
	if c.checked.Load() && c.rec != nil {
		return c.rec.Close()
	}
	return c.Conn.Close()
}

// CloseWrite sends close_notify and shuts the socket's sending side.
func (c *serverConn) CloseWrite() error {
	if c.checked.Load() && c.rec != nil {
		return c.rec.CloseWrite()
	}
	return c.Conn.CloseWrite()
}

// NetConn returns the socket under TLS, a tunnel.TLSSocket.
func (c *serverConn) NetConn() net.Conn { return c.sock }

// RecordConn is the connection's records, when taken (for the tunnel);
// nil when crypto/tls runs them.
func (c *serverConn) RecordConn() *tunnel.RecordConn {
	if !c.checked.Load() {
		return nil
	}
	return c.rec
}

// check completes the handshake, if it is not done, closes a
// tls-alpn-01 validation's connection (returning io.EOF for one, so
// fasthttp takes it for a client that closed before a request), and
// takes the record layer of a TLS 1.3 connection.
func (c *serverConn) check() error {
	if c.checked.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checked.Load() {
		return nil
	}
	if err := c.Conn.Handshake(); err != nil {
		return err
	}
	st := c.ConnectionState()
	if st.NegotiatedProtocol == alpnACMETLS {
		_ = c.Conn.Close()
		return io.EOF
	}
	layer, reason := "crypto_tls", "other"
	switch st.Version {
	case tls.VersionTLS12:
		reason = "tls12"
	case tls.VersionTLS11:
		reason = "tls11"
	case tls.VersionTLS10:
		reason = "tls10"
	}
	if s, err := c.capture.Take(st); err == nil {
		c.rec = tunnel.NewRecordConn(c.sock, st, s)
		layer, reason = "wsgate", "tls13"
	}
	if m, ok := c.metrics.(RecordMetrics); ok {
		m.TLSRecords(layer, reason)
	}
	c.checked.Store(true)
	return nil
}
