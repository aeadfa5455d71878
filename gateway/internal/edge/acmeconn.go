package edge

import (
	"crypto/tls"
	"io"
	"sync/atomic"
)

// serverConn is a client's connection as the TLS listener hands it over:
// a *tls.Conn that, once its handshake is done, ends at once if the
// handshake negotiated "acme-tls/1". Such a handshake is an ACME CA's
// tls-alpn-01 validation: the CA has seen the certificate once the
// handshake is done, and the connection is for nothing else (RFC 8737
// section 3). It was not asked for a client certificate either
// (Certificates.SetManaged), so it must never reach HTTP.
//
// The check runs before the first byte read or written (the handshake
// runs there too), so no request is read and no answer written over such
// a connection. Like a *tls.Conn, it takes one Read and one Write at a
// time, the two side by side.
type serverConn struct {
	*tls.Conn
	checked atomic.Bool // the handshake is done and did not negotiate acme-tls/1
}

// Read reads application data, once the handshake is done and checked.
func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// Write writes application data, once the handshake is done and checked.
func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// check completes the handshake, if it is not done, and closes a
// tls-alpn-01 validation's connection; it returns io.EOF for one, so
// fasthttp takes it for a client that closed before a request.
func (c *serverConn) check() error {
	if c.checked.Load() {
		return nil
	}
	if err := c.Handshake(); err != nil {
		return err
	}
	if c.ConnectionState().NegotiatedProtocol == alpnACMETLS {
		_ = c.Close()
		return io.EOF
	}
	c.checked.Store(true)
	return nil
}
