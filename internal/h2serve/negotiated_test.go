package h2serve_test

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/h2serve"
)

// serveNegotiated runs srv.ServeNegotiated on every connection of a
// loopback listener, as a TLS listener whose ALPN chose h2 does, and
// returns its address.
func serveNegotiated(t *testing.T, srv *h2serve.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = srv.ServeNegotiated(c, ioTimeout) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		srv.Close()
		waitFor(t, "connections to end", func() bool { return srv.Stats().Conns == 0 })
	})
	return ln.Addr().String()
}

// TestServeNegotiated serves a connection whose preface follows at once,
// and closes one that sends something else instead.
func TestServeNegotiated(t *testing.T) {
	srv := &h2serve.Server{Handler: echo}
	addr := serveNegotiated(t, srv)
	hc, err := h2client.Dial(addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	s, err := hc.Open("/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _, err := s.Response(ioTimeout); err != nil || status != 200 {
		t.Fatalf("status %d, %v", status, err)
	}
	hc.Close()

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var b [64]byte
	if n, err := nc.Read(b[:]); err == nil {
		t.Fatalf("read %q after a request that is not the preface, want the connection closed", b[:n])
	}
}

// TestRapidReset pins the bound on CVE-2023-44487: streams opened and
// reset at once still count while their Handler runs, so once
// MaxConcurrentStreams Handlers are busy the next stream is refused, and
// no more than that many run at a time.
func TestRapidReset(t *testing.T) {
	const max = 4
	release := make(chan struct{})
	running := make(chan struct{}, 100)
	srv := &h2serve.Server{MaxConcurrentStreams: max, Handler: func(s *h2serve.Stream) {
		if s.Request().Path == "/ok" {
			_ = s.Respond(200, nil, nil)
			return
		}
		running <- struct{}{}
		<-release // admission work the reset does not stop
	}}
	addr := serveNegotiated(t, srv)
	c := dialRaw(t, addr, true)
	for i := range 3 * max {
		id := uint32(2*i + 1)
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: connectBlock, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	for refused < 2*max {
		f := c.until(t, "RST_STREAM(REFUSED_STREAM)", func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.ErrCode == http2.ErrCodeRefusedStream
		})
		if id := f.Header().StreamID; id <= 2*max {
			t.Fatalf("stream %d refused, one of the first %d", id, max)
		}
		refused++
	}
	if n := len(running); n != max {
		t.Fatalf("%d handlers ran, want %d", n, max)
	}
	if st := srv.Stats(); st.Refused != 2*max || st.Opened != max || st.Streams != 0 {
		t.Fatalf("stats %+v, want %d opened, %d refused, none open", st, max, 2*max)
	}
	close(release)
	// Once the handlers are done, a new stream is served.
	ok := headerBlock(":method", "GET", ":scheme", "https", ":authority", "a", ":path", "/ok")
	id := uint32(2*3*max + 1)
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatal("still refused after the handlers returned")
		}
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: ok, EndHeaders: true, EndStream: true})
		f := c.until(t, "an answer", func(f http2.Frame) bool { return f.Header().StreamID == id })
		if _, refusedAgain := f.(*http2.RSTStreamFrame); !refusedAgain {
			break
		}
		id += 2
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleTimeout closes a connection left without a stream, after
// GOAWAY(NO_ERROR), and not one whose stream is open.
func TestIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := &h2serve.Server{IdleTimeout: 50 * time.Millisecond, Handler: func(s *h2serve.Stream) {
		_ = s.WriteHeader(200, nil)
		<-release
	}}
	addr := serveNegotiated(t, srv)
	c := dialRaw(t, addr, true)
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	c.until(t, "the stream's HEADERS", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	// Held past several idle timeouts: a PING answered shows the
	// connection open (the timeouts are not asserted, only outlived).
	for range 5 {
		time.Sleep(50 * time.Millisecond)
		if err := c.fr.WritePing(false, [8]byte{1}); err != nil {
			t.Fatal(err)
		}
		c.until(t, "the PING's answer", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	}
	close(release)
	if err := c.fr.WriteData(1, true, nil); err != nil { // the stream ends both ways
		t.Fatal(err)
	}
	c.goAwayThenEOF(t, http2.ErrCodeNo)
}
