package loadgen

import (
	"bytes"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testca"
)

// heldConn is a server-side connection whose writes are kept until
// flush: several TLS records then reach the client in one segment, or
// one record in two parts.
type heldConn struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (h *heldConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.Write(p)
}

// flush sends the first n kept bytes (all for n < 0).
func (h *heldConn) flush(n int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n < 0 || n > h.buf.Len() {
		n = h.buf.Len()
	}
	_, err := h.Conn.Write(h.buf.Next(n))
	return err
}

// tlsPair returns a client tlsReader and the server's held connection
// over loopback TCP, handshake done.
func tlsPair(t *testing.T) (*tlsReader, *tls.Conn, *heldConn) {
	t.Helper()
	ca, err := testca.New("tls reader CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvc := make(chan *tls.Conn, 1)
	held := make(chan *heldConn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			srvc <- nil
			return
		}
		h := &heldConn{Conn: nc}
		held <- h
		s := tls.Server(h, &tls.Config{Certificates: []tls.Certificate{leaf.TLS()}})
		_ = s.Handshake()
		srvc <- s
	}()
	tcp, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(tcp, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", SessionTicketsDisabled: true})
	h := <-held
	done := make(chan error, 1)
	go func() { done <- tc.Handshake() }()
	// The server's handshake flight is kept like everything it writes:
	// send it as it comes until the client is done.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := h.flush(-1); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			s := <-srvc
			t.Cleanup(func() { _ = tc.Close(); _ = s.Close() })
			if err := h.flush(-1); err != nil {
				t.Fatal(err)
			}
			return newTLSReader(&tlsConn{Conn: tc, tcp: tcp}, readPool), s, h
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no handshake within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// readAll reads from r until want bytes came or an error.
func readAll(t *testing.T, r *tlsReader, want int) []byte {
	t.Helper()
	var got []byte
	for len(got) < want {
		bp, n, err := r.Read()
		if n > 0 {
			got = append(got, (*bp)[:n]...)
		}
		readPool.Put(bp)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
	}
	return got
}

// TestTLSReaderRecords: records that reach the client in one segment are
// all returned, though the socket has nothing more to say after the first
// (crypto/tls holds the others); a record that arrives in two parts,
// further apart than tlsGrace, is returned whole once its tail comes; and
// the user's read deadline still ends a wait.
func TestTLSReaderRecords(t *testing.T) {
	r, s, h := tlsPair(t)
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, m := range []string{"one", "two", "three"} {
		if _, err := s.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.flush(-1); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r, len("onetwothree")); string(got) != "onetwothree" {
		t.Fatalf("read %q", got)
	}

	if _, err := s.Write([]byte("split record")); err != nil {
		t.Fatal(err)
	}
	if err := h.flush(9); err != nil { // the record's header and a little
		t.Fatal(err)
	}
	go func() {
		time.Sleep(5 * tlsGrace)
		_ = h.flush(-1) // a failure shows as the read's
	}()
	if got := readAll(t, r, len("split record")); string(got) != "split record" {
		t.Fatalf("read %q", got)
	}

	_ = r.c.SetReadDeadline(time.Now().Add(3 * tlsGrace))
	if _, n, err := r.Read(); n != 0 || !isDeadline(err) {
		t.Fatalf("read %d bytes, %v; want the deadline's error", n, err)
	}
}

func isDeadline(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
