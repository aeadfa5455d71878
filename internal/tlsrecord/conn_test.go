package tlsrecord

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testca"
)

// sessionConn is a blocking net.Conn over a Session and its socket, the
// tests' stand-in for the poller: what it reads goes through Open, what
// it writes through Seal, both from the socket straight.
type sessionConn struct {
	net.Conn // the socket

	mu sync.Mutex // guards s: Open and Seal may run from two goroutines here
	s  *Session

	rbuf  []byte // ciphertext read
	plain []byte // data opened and not yet read
	rerr  error
}

func newSessionConn(sock net.Conn, s *Session) *sessionConn {
	return &sessionConn{Conn: sock, s: s, rbuf: make([]byte, 20000)}
}

func (c *sessionConn) Read(p []byte) (int, error) {
	for len(c.plain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		n, err := c.Conn.Read(c.rbuf)
		c.mu.Lock()
		plain, oerr := c.s.Open(nil, c.rbuf[:n])
		var alert []byte
		if oerr != nil && oerr != io.EOF {
			alert = c.s.AppendClose(nil, oerr)
		}
		c.mu.Unlock()
		if len(alert) > 0 {
			c.Conn.Write(alert)
		}
		c.plain = plain
		switch {
		case oerr != nil:
			c.rerr = oerr
		case err != nil:
			c.rerr = err
		}
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	return n, nil
}

func (c *sessionConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	out, err := c.s.Seal(make([]byte, 0, SealedLen(len(p))), p)
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite sends close_notify.
func (c *sessionConn) CloseWrite() error {
	c.mu.Lock()
	out := c.s.AppendClose(nil, nil)
	c.mu.Unlock()
	_, err := c.Conn.Write(out)
	return err
}

// testServer is a TLS server on loopback that hands each connection,
// after crypto/tls's handshake over a Capture, to serve: as a
// sessionConn when Take carried it, else as the *tls.Conn.
type testServer struct {
	ln   net.Listener
	ca   *testca.CA
	conf *tls.Config // from ServerConfig
}

func newTestServer(t *testing.T, edit func(*tls.Config)) *testServer {
	t.Helper()
	ca, err := testca.New("tlsrecord test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{leaf.TLS()}, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if edit != nil {
		edit(conf)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// One config for all connections, as ServerConfig says: its automatic
	// session ticket keys are its own.
	return &testServer{ln: ln, ca: ca, conf: ServerConfig(conf)}
}

// result is what the server found of one connection.
type result struct {
	session *Session // nil if not carried
	takeErr error
	conn    net.Conn // the sessionConn or the *tls.Conn
	err     error    // of the handshake
}

// accept takes the next connection through a Capture.
func (ts *testServer) accept(t *testing.T) result {
	t.Helper()
	sock, err := ts.ln.Accept()
	if err != nil {
		return result{err: err}
	}
	t.Cleanup(func() { sock.Close() })
	sock.SetDeadline(time.Now().Add(20 * time.Second))
	cc := NewCapture(sock)
	tc := tls.Server(cc, ts.conf)
	if err := tc.Handshake(); err != nil {
		return result{err: err}
	}
	s, err := cc.Take(tc.ConnectionState())
	if err != nil {
		return result{takeErr: err, conn: tc}
	}
	return result{session: s, conn: newSessionConn(cc.NetConn(), s)}
}

// serveOne accepts one connection in a goroutine and returns its result
// on the channel.
func (ts *testServer) serveOne(t *testing.T) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- ts.accept(t) }()
	return ch
}

func (ts *testServer) dial(t *testing.T, edit func(*tls.Config)) *tls.Conn {
	t.Helper()
	conf := &tls.Config{RootCAs: ts.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if edit != nil {
		edit(conf)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ts.ln.Addr().String(), conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

func wantCarried(t *testing.T, r result) *sessionConn {
	t.Helper()
	if r.err != nil {
		t.Fatalf("handshake: %v", r.err)
	}
	if r.session == nil {
		t.Fatalf("not carried: %v", r.takeErr)
	}
	return r.conn.(*sessionConn)
}
