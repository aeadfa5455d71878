package h2

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The misbehaving nodes of the client side's test kit that the other
// files do not cover (see docs/protocol.md for which test covers which).

// TestNodeNeverSendsSettings: a node that accepts the connection and
// never sends its SETTINGS (nor anything) fails the handshake at its
// context's deadline (the pool's connect_timeout), and the socket is
// closed.
func TestNodeNeverSendsSettings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// The socket's deadline is the context's: either may say so first.
	if _, err := testHandshake(ctx, client, Config{}); !errors.Is(err, context.DeadlineExceeded) && errTimeout(err) == nil {
		t.Fatalf("handshake with a silent node: %v, want its deadline", err)
	}
	// The node sees the preface, then the end of the connection.
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := server.Read(buf); err != nil {
			if errTimeout(err) != nil {
				t.Fatalf("the socket was not closed: %v", err)
			}
			break
		}
	}
}

// errTimeout returns err when it is a timeout, nil otherwise.
func errTimeout(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return nil
}

// TestResponseHeaderCRLF: a node's response field whose value holds CR
// or LF (a header injection into the client's HTTP/1.1 101) fails that
// stream alone: RST_STREAM(PROTOCOL_ERROR), no response reaches the
// caller (the gateway answers the client 502), the connection goes on.
func TestResponseHeaderCRLF(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a\r\nSet-Cookie: stolen=1", "a\nb", "a\rb", "a\x00b"} {
		res := openAsync(c, &Request{Authority: "n", Path: "/"})
		hf := n.nextHeaders()
		n.respond(hf.StreamID, 1000, ":status", "200", "x-evil", v)
		r := <-res
		var se *StreamError
		if !errors.As(r.err, &se) || se.Code != http2.ErrCodeProtocol || r.s != nil || r.resp != nil {
			t.Fatalf("value %q: stream %v, response %+v, error %v; want a PROTOCOL_ERROR reset", v, r.s, r.resp, r.err)
		}
		rst := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
		if rst.StreamID != hf.StreamID || rst.ErrCode != http2.ErrCodeProtocol {
			t.Fatalf("value %q: RST_STREAM %d %v", v, rst.StreamID, rst.ErrCode)
		}
	}
	pingAfter(t, c, n)
	if st := c.Stats(); st != (Stats{}) {
		t.Errorf("holds %+v", st)
	}
}

// TestConnCutUnderManyStreams: a node connection carrying 5,000 streams
// that the node cuts ends every one of them with ErrConnLost (each
// client's 1012), returns its counts to zero, and another node's
// connection goes on.
func TestConnCutUnderManyStreams(t *testing.T) {
	const streams = 5000
	bystander, bn, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	c, n, err := newFakeNode(t, Config{StreamWindow: 4 << 10}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	n.nc.SetDeadline(time.Now().Add(time.Minute))
	results := make(chan openResult, streams)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, resp, err := c.OpenWebSocket(ctx, &Request{Authority: "n", Path: "/"})
			results <- openResult{s, resp, err}
		})
	}
	for range streams {
		hf := n.nextHeaders()
		n.respond(hf.StreamID, 1000, ":status", "200")
		n.fr.WriteData(hf.StreamID, false, []byte("hello"))
	}
	wg.Wait()
	close(results)
	var open []*Stream
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		open = append(open, r.s)
	}
	if st := c.Stats(); st.Streams != streams {
		t.Fatalf("%+v, want %d streams", st, streams)
	}
	n.nc.Close()
	<-c.Done()
	buf := make([]byte, 16)
	for i, s := range open {
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, err := s.Read(buf)
		if k > 0 { // what came before the cut is read first
			k, err = s.Read(buf)
		}
		if k != 0 || !errors.Is(err, ErrConnLost) {
			t.Fatalf("stream %d: %d %v, want ErrConnLost", i, k, err)
		}
		s.Close()
	}
	if st := c.Stats(); st != (Stats{}) {
		t.Errorf("holds %+v after the cut", st)
	}
	pingAfter(t, bystander, bn)
}
