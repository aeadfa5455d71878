package h2serve_test

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/wsgate/wsgate/internal/h2serve"
)

// openHugeWindows makes c grant the largest stream and connection send
// windows, so that flow control never holds the server's writes back,
// and opens stream 1 with an extended CONNECT.
func openHugeWindows(c *rawConn) error {
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}); err != nil {
		return err
	}
	if err := c.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		return err
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock, EndHeaders: true})
}

// TestWriteWaitsForAClientThatDoesNotRead pins the bound on a
// connection's write queue (Server.WriteQueue): a client that grants the
// largest windows and then reads nothing holds back the stream writing to
// it, as a TCP socket's full buffer would, rather than the server
// queueing what the stream writes until WriteTimeout. The handler writes
// 1 MiB at a time under a write deadline; what Write accepted before the
// deadline stopped it is at most the socket buffers plus the queue, far
// below the 128 MiB it offers (it was all of it when Write only queued).
func TestWriteWaitsForAClientThatDoesNotRead(t *testing.T) {
	accepted := make(chan int64, 1)
	srv := &h2serve.Server{WriteTimeout: time.Minute, Handler: func(s *h2serve.Stream) {
		var n int64
		defer func() { accepted <- n }()
		if s.WriteHeader(200, nil) != nil {
			return
		}
		chunk := bytes.Repeat([]byte("q"), 1<<20)
		_ = s.SetWriteDeadline(time.Now().Add(time.Second)) // ends the test; no figure depends on it
		for range 128 {
			m, err := s.Write(chunk)
			n += int64(m)
			if err != nil {
				return
			}
		}
	}}
	c := dialRaw(t, serve(t, srv), false)
	if err := openHugeWindows(c); err != nil {
		t.Fatal(err)
	}
	c.until(t, "the 200", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	// From here on the client reads nothing.
	var n int64
	select {
	case n = <-accepted:
	case <-time.After(ioTimeout):
		t.Fatal("the handler's writes did not end")
	}
	t.Logf("Write accepted %d KiB for a client that reads nothing", n>>10)
	if n > 32<<20 {
		t.Fatalf("Write accepted %d MiB for a client that reads nothing: the write queue is unbounded", n>>20)
	}
}

// TestSlowSteadyReaderIsNotCut pins that WriteTimeout bounds each write's
// progress, not the whole of what was queued: a client that reads 16 KiB
// every 5 ms (about 3 MB/s, many times the 64 KiB per 300 ms the writer
// needs) gets all 6 MiB a stream writes at once. The connection is a
// net.Pipe, which buffers nothing, so the writer sees the client's pace.
// When the writer had to write its whole queue within WriteTimeout, the
// queue held the 6 MiB and the connection was cut.
func TestSlowSteadyReaderIsNotCut(t *testing.T) {
	const total = 6 << 20
	srv := &h2serve.Server{WriteTimeout: 300 * time.Millisecond, Handler: func(s *h2serve.Stream) {
		if s.WriteHeader(200, nil) != nil {
			return
		}
		_ = s.SetWriteDeadline(time.Now().Add(ioTimeout))
		_, _ = s.Write(bytes.Repeat([]byte("s"), total))
		_ = s.Close()
	}}
	sc, cc := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(sc) }() // the preface is not sent: ServeConn expects it read
	t.Cleanup(func() {
		cc.Close()
		<-served
	})
	_ = cc.SetDeadline(time.Now().Add(3 * ioTimeout))
	c := &rawConn{nc: cc, fr: http2.NewFramer(cc, bufio.NewReaderSize(&pacedReader{r: cc, pause: 5 * time.Millisecond}, 16<<10))}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	// The client's frames go while the server reads (net.Pipe writes
	// wait for a reader); it acknowledges no SETTINGS, which the server
	// does not require.
	go func() { _ = openHugeWindows(c) }()
	got := 0
	for got < total {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d KiB of %d: %v (a slow but steady reader was cut)", got>>10, total>>10, err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			got += len(f.Data())
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset %v after %d KiB", f.ErrCode, got>>10)
		}
	}
}

// pacedReader is a client that reads slowly: each Read waits pause first.
type pacedReader struct {
	r     net.Conn
	pause time.Duration
}

func (p *pacedReader) Read(b []byte) (int, error) {
	time.Sleep(p.pause)
	return p.r.Read(b)
}

// TestSetWriteTimeoutAppliesToNewConnections pins SetWriteTimeout (a
// reload's write_timeout): a connection served after it whose client
// stops reading is closed once a write has not moved for the new
// timeout, not the WriteTimeout the server started with (a minute, past
// this test's wait).
func TestSetWriteTimeoutAppliesToNewConnections(t *testing.T) {
	srv := &h2serve.Server{WriteTimeout: time.Minute, Handler: func(s *h2serve.Stream) {
		if s.WriteHeader(200, nil) != nil {
			return
		}
		chunk := bytes.Repeat([]byte("w"), 1<<20)
		for range 64 {
			if _, err := s.Write(chunk); err != nil {
				return
			}
		}
	}}
	srv.SetWriteTimeout(300 * time.Millisecond)
	c := dialRaw(t, serve(t, srv), false)
	if err := openHugeWindows(c); err != nil {
		t.Fatal(err)
	}
	c.until(t, "the 200", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	// From here on the client reads nothing.
	waitFor(t, "the connection to be closed", func() bool { return srv.Stats().Conns == 0 })
}

// TestResetWakesWriteWaitingForRoom pins that a Write waiting for room in
// the connection's queue holds no lock the connection's reader needs: on
// a net.Pipe, which buffers nothing, a client that stops reading after
// the 200 fills the queue, and its RST_STREAM, read while the Write
// waits, ends that Write with the stream's error.
func TestResetWakesWriteWaitingForRoom(t *testing.T) {
	var written atomic.Int64
	done := make(chan error, 1)
	srv := &h2serve.Server{WriteTimeout: time.Minute, Handler: func(s *h2serve.Stream) {
		if s.WriteHeader(200, nil) != nil {
			return
		}
		chunk := bytes.Repeat([]byte("r"), 16<<10)
		_ = s.SetWriteDeadline(time.Now().Add(2 * ioTimeout)) // so that a failing test ends
		for range 1024 {
			n, err := s.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}}
	sc, cc := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(sc) }()
	t.Cleanup(func() {
		cc.Close()
		<-served
	})
	_ = cc.SetDeadline(time.Now().Add(ioTimeout))
	c := &rawConn{nc: cc, fr: http2.NewFramer(cc, cc)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	opened := make(chan error, 1)
	go func() { opened <- openHugeWindows(c) }() // net.Pipe writes wait for the server's reads
	c.until(t, "the 200", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	// From here on the client reads nothing: the queue fills.
	waitFor(t, "the queue to fill", func() bool { return written.Load() >= 256<<10 })
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var se *h2serve.StreamError
		if !errors.As(err, &se) || !se.Remote {
			t.Fatalf("Write ended with %v, want the client's reset", err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("a Write waiting for room was not woken by its stream's reset")
	}
}
