package tlsrecord

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// exchange sends 1 MiB each way at once between the client and the
// server's sessionConn and checks both arrive whole.
func exchange(t *testing.T, client *tls.Conn, server *sessionConn) {
	t.Helper()
	up, down := make([]byte, 1<<20), make([]byte, 1<<20)
	rand.Read(up)
	rand.Read(down)
	errs := make(chan error, 3)
	var gotUp []byte
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		_, err := client.Write(up)
		errs <- err
	}()
	go func() {
		defer wg.Done()
		for b := down; len(b) > 0; {
			n := min(len(b), 50000)
			if _, err := server.Write(b[:n]); err != nil {
				errs <- err
				return
			}
			b = b[n:]
		}
	}()
	go func() {
		defer wg.Done()
		gotUp = make([]byte, len(up))
		_, err := io.ReadFull(server, gotUp)
		errs <- err
	}()
	gotDown := make([]byte, len(down))
	if _, err := io.ReadFull(client, gotDown); err != nil {
		t.Fatalf("client read: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Fatal("data changed on the way")
	}
}

// TestGoClient runs crypto/tls's client against a server whose record
// layer is a Session after crypto/tls's handshake over a Capture: with a
// session ticket (crypto/tls seals it under the server's traffic secret,
// so the Session writes from sequence number 1) and a resumption on it,
// without tickets (0), after a HelloRetryRequest, and with a client certificate (the ticket goes out
// after the client's certificate is read). Each exchanges 1 MiB both ways,
// takes a KeyUpdate the server sends (the client cannot send one through
// crypto/tls's API; TestKeyUpdate has the client's), and ends with
// close_notify each way. Go's client picks the suite (AES-128-GCM with AES
// hardware, ChaCha20-Poly1305 without); TestOpenSSLClient forces each.
func TestGoClient(t *testing.T) {
	tests := []struct {
		name    string
		server  func(*tls.Config)
		client  func(*testServer, *tls.Config)
		seq     uint64
		resumes bool
	}{
		{"session ticket", nil, func(_ *testServer, c *tls.Config) { c.ClientSessionCache = tls.NewLRUClientSessionCache(4) }, 1, true},
		{"no tickets", func(c *tls.Config) { c.SessionTicketsDisabled = true }, nil, 0, false},
		// The client's key share is not the server's group: a
		// HelloRetryRequest, a second ClientHello, and a
		// change_cipher_spec from each side in the handshake.
		{"hello retry", func(c *tls.Config) { c.CurvePreferences = []tls.CurveID{tls.CurveP256} }, func(_ *testServer, c *tls.Config) {
			c.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
		}, 0, false},
		{"client certificate", func(c *tls.Config) { c.ClientAuth = tls.RequireAndVerifyClientCert }, func(ts *testServer, c *tls.Config) {
			leaf, err := ts.ca.Client("client", "", "")
			if err != nil {
				panic(err)
			}
			c.Certificates = []tls.Certificate{leaf.TLS()}
			c.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, tt.server)
			edit := func(c *tls.Config) {
				if tt.client != nil {
					tt.client(ts, c)
				}
			}
			runs := 1
			if tt.resumes {
				runs = 2
			}
			cache := (*tls.Config)(nil)
			for run := range runs {
				ch := ts.serveOne(t)
				client := ts.dial(t, func(c *tls.Config) {
					if cache != nil {
						c.ClientSessionCache = cache.ClientSessionCache
						c.Certificates = cache.Certificates
						return
					}
					edit(c)
					cache = c
				})
				r := <-ch
				server := wantCarried(t, r)
				cs := client.ConnectionState()
				t.Logf("run %d: %s, resumed %v, server's first sequence number %d", run, tls.CipherSuiteName(cs.CipherSuite), cs.DidResume, r.session.out.seq)
				if run == 1 && !cs.DidResume {
					t.Error("the second connection did not resume")
				}
				if r.session.out.seq != tt.seq || r.session.in.seq != 0 {
					t.Fatalf("sequence numbers: read %d, write %d; want 0, %d", r.session.in.seq, r.session.out.seq, tt.seq)
				}
				exchange(t, client, server)

				server.mu.Lock()
				server.s.keyUpdateDue = true
				server.mu.Unlock()
				if _, err := server.Write([]byte("after our KeyUpdate\n")); err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(client).ReadString('\n')
				if err != nil || line != "after our KeyUpdate\n" {
					t.Fatalf("client read %q, %v", line, err)
				}

				if err := client.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				if n, err := server.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Fatalf("server after the client's close_notify: %d, %v", n, err)
				}
				if err := server.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Fatalf("client after the server's close_notify: %d, %v", n, err)
				}
			}
		})
	}
}

// holdConn passes its first write and holds the later ones until flush,
// so that a client's Finished and its first data leave in one write.
type holdConn struct {
	net.Conn
	writes int
	held   []byte
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes == 1 {
		return c.Conn.Write(p)
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

func (c *holdConn) flush() error {
	_, err := c.Conn.Write(c.held)
	return err
}

// TestDataRightAfterFinished pins that crypto/tls reads nothing past the
// client's Finished: the client's first data, in the same TCP write as
// its Finished, is in the socket for the Session, not lost in crypto/tls.
func TestDataRightAfterFinished(t *testing.T) {
	ts := newTestServer(t, nil)
	ch := ts.serveOne(t)
	sock, err := net.Dial("tcp", ts.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	hc := &holdConn{Conn: sock}
	client := tls.Client(hc, &tls.Config{RootCAs: ts.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("first words\n")); err != nil {
		t.Fatal(err)
	}
	if err := hc.flush(); err != nil {
		t.Fatal(err)
	}
	server := wantCarried(t, <-ch)
	line, err := bufio.NewReader(server).ReadString('\n')
	if err != nil || line != "first words\n" {
		t.Fatalf("server read %q, %v", line, err)
	}
}

// TestTLS12StaysWithCryptoTLS pins what Take does with a connection it
// does not carry: an error wrapping ErrNotCarried, and the *tls.Conn goes
// on over the Capture as over the socket.
func TestTLS12StaysWithCryptoTLS(t *testing.T) {
	ts := newTestServer(t, nil)
	ch := ts.serveOne(t)
	client := ts.dial(t, func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12 })
	r := <-ch
	if r.err != nil || r.session != nil || !errors.Is(r.takeErr, ErrNotCarried) {
		t.Fatalf("handshake %v, session %v, Take %v", r.err, r.session != nil, r.takeErr)
	}
	t.Logf("Take: %v", r.takeErr)
	go func() { r.conn.Write([]byte("over crypto/tls\n")) }()
	if line, err := bufio.NewReader(client).ReadString('\n'); err != nil || line != "over crypto/tls\n" {
		t.Fatalf("client read %q, %v", line, err)
	}
	client.Write([]byte("back\n"))
	if line, err := bufio.NewReader(r.conn).ReadString('\n'); err != nil || line != "back\n" {
		t.Fatalf("server read %q, %v", line, err)
	}
}

// TestTakeShutsCryptoTLS pins that once Take has run the *tls.Conn
// writes nothing (a record from it would reuse a nonce of the Session's),
// and that a connection crypto/tls has written data on is not carried.
func TestTakeShutsCryptoTLS(t *testing.T) {
	ts := newTestServer(t, nil)
	ch := make(chan error, 1)
	go func() {
		sock, err := ts.ln.Accept()
		if err != nil {
			ch <- err
			return
		}
		defer sock.Close()
		cc := NewCapture(sock)
		tc := tls.Server(cc, ts.conf)
		if err := tc.Handshake(); err != nil {
			ch <- err
			return
		}
		s, err := cc.Take(tc.ConnectionState())
		if err != nil {
			ch <- err
			return
		}
		if _, err := tc.Write([]byte("from crypto/tls")); err == nil {
			ch <- errors.New("the *tls.Conn wrote after Take")
			return
		}
		out, _ := s.Seal(nil, []byte("from the session\n"))
		_, err = sock.Write(out)
		ch <- err
	}()
	client := ts.dial(t, nil)
	line, err := bufio.NewReader(client).ReadString('\n')
	if err != nil || line != "from the session\n" {
		t.Fatalf("client read %q, %v", line, err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}

	ch2 := make(chan error, 1)
	go func() {
		sock, err := ts.ln.Accept()
		if err != nil {
			ch2 <- err
			return
		}
		defer sock.Close()
		cc := NewCapture(sock)
		tc := tls.Server(cc, ts.conf)
		if _, err := tc.Write([]byte("early\n")); err != nil { // handshakes, then writes
			ch2 <- err
			return
		}
		if _, err := cc.Take(tc.ConnectionState()); !errors.Is(err, ErrNotCarried) {
			ch2 <- errors.New("carried after crypto/tls wrote data")
			return
		}
		ch2 <- nil
	}()
	client = ts.dial(t, nil)
	if line, err := bufio.NewReader(client).ReadString('\n'); err != nil || line != "early\n" {
		t.Fatalf("client read %q, %v", line, err)
	}
	if err := <-ch2; err != nil {
		t.Fatal(err)
	}
}

// TestNotCarried pins the handshakes Take leaves with crypto/tls, which
// goes on with them: one whose records under the client's secret
// crypto/tls has read (its reader would start past 0), and one whose
// handshake records outgrew what a Capture keeps.
func TestNotCarried(t *testing.T) {
	tests := []struct {
		name   string
		before func(tc *tls.Conn) error // the server's, before Take
		why    string                   // in Take's error
	}{
		{"crypto/tls read data", func(tc *tls.Conn) error {
			_, err := bufio.NewReader(tc).ReadString('\n')
			return err
		}, "read records under the client's traffic secret"},
		{"handshake records over the bound", func(tc *tls.Conn) error {
			return tc.Handshake()
		}, "handshake records over 100 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "handshake records over the bound" {
				saved := maxRecorded
				maxRecorded = 100 // less than the server's certificate
				t.Cleanup(func() { maxRecorded = saved })
			}
			ts := newTestServer(t, nil)
			ch := make(chan error, 1)
			go func() {
				sock, err := ts.ln.Accept()
				if err != nil {
					ch <- err
					return
				}
				defer sock.Close()
				cc := NewCapture(sock)
				tc := tls.Server(cc, ts.conf)
				if err := tt.before(tc); err != nil {
					ch <- err
					return
				}
				if _, err := cc.Take(tc.ConnectionState()); !errors.Is(err, ErrNotCarried) || !strings.Contains(err.Error(), tt.why) {
					ch <- fmt.Errorf("Take: %v", err)
					return
				}
				_, err = tc.Write([]byte("still crypto/tls\n"))
				ch <- err
			}()
			client := ts.dial(t, nil)
			client.Write([]byte("hello\n"))
			if line, err := bufio.NewReader(client).ReadString('\n'); err != nil || line != "still crypto/tls\n" {
				t.Fatalf("client read %q, %v", line, err)
			}
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		})
	}
}
