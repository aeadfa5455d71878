package h2serve_test

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2serve"
)

// serveOne serves the first connection to a new listener with
// ServeNegotiated and returns its address and the channel that gets what
// ServeNegotiated returned.
func serveOne(t *testing.T, srv *h2serve.Server) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			done <- err
			return
		}
		done <- srv.ServeNegotiated(c, ioTimeout)
	}()
	t.Cleanup(func() { ln.Close(); srv.Close() })
	return ln.Addr().String(), done
}

// goAwayCode reads c's frames on a goroutine of its own until a GOAWAY,
// whose code it sends, or the connection's end (the channel closes).
func goAwayCode(c *rawConn) <-chan http2.ErrCode {
	got := make(chan http2.ErrCode, 1)
	go func() {
		defer close(got)
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				got <- g.ErrCode
				return
			}
		}
	}()
	return got
}

// TestRapidResetIsCut pins the bound on streams reset before their
// answer: a client that opens WebSocket streams and resets each at once,
// under MaxConcurrentStreams (none is refused, so only the early resets
// cost), is cut with GOAWAY(ENHANCE_YOUR_CALM) within 200,000 streams,
// and ServeNegotiated's error says it was cut for flooding
// (CutForFlood). Before, each HEADERS earned what its RST_STREAM spent
// and such a client was never cut.
func TestRapidResetIsCut(t *testing.T) {
	srv := &h2serve.Server{MaxConcurrentStreams: 10000, Handler: func(s *h2serve.Stream) { <-s.Done() }}
	addr, served := serveOne(t, srv)
	c := dialRaw(t, addr, true)
	_ = c.nc.SetDeadline(time.Now().Add(time.Minute))
	got := goAwayCode(c)
	bw := bufio.NewWriterSize(c.nc, 32<<10)
	wfr := http2.NewFramer(bw, nil)
	const n = 200_000
	cut := false
	for i := 0; i < n && !cut; i++ {
		id := uint32(2*i + 1)
		if wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: connectBlock, EndHeaders: true}) != nil ||
			wfr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
		if i%500 == 499 {
			if bw.Flush() != nil {
				break
			}
			select {
			case <-got:
				cut = true
			default:
			}
		}
	}
	_ = bw.Flush()
	select {
	case code, ok := <-got:
		if ok && code != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", code)
		}
	case <-time.After(ioTimeout):
		t.Fatalf("%d streams opened and reset, and no GOAWAY", n)
	}
	select {
	case err := <-served:
		if !h2serve.CutForFlood(err) {
			t.Fatalf("ServeNegotiated returned %v, not a cut for flooding", err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("ServeNegotiated did not return")
	}
	if st := srv.Stats(); st.Refused != 0 {
		t.Fatalf("%d streams refused: the cut was not the early resets'", st.Refused)
	}
}

// TestResetAfterAnswerIsNotCut is the other side: 3,000 streams each reset
// by the client once its answer's HEADERS came (a client cancelling what
// it no longer needs) are served to the end, and the connection still
// answers a PING; and CutForFlood is false for a connection the client
// closed.
func TestResetAfterAnswerIsNotCut(t *testing.T) {
	srv := &h2serve.Server{Handler: func(s *h2serve.Stream) {
		if s.WriteHeader(200, nil) == nil {
			<-s.Done()
		}
	}}
	addr, served := serveOne(t, srv)
	c := dialRaw(t, addr, true)
	for i := range 3000 {
		id := uint32(2*i + 1)
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: connectBlock, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		c.until(t, "the stream's HEADERS", func(f http2.Frame) bool {
			if g, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("GOAWAY %v after %d streams", g.ErrCode, i)
			}
			_, ok := f.(*http2.MetaHeadersFrame)
			return ok && f.Header().StreamID == id
		})
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
	}
	pingRoundTrip(t, c, [8]byte{7})
	c.nc.Close()
	select {
	case err := <-served:
		if h2serve.CutForFlood(err) {
			t.Fatalf("ServeNegotiated returned %v, a cut for flooding", err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("ServeNegotiated did not return")
	}
	if h2serve.CutForFlood(errors.New("h2serve: connection error ENHANCE_YOUR_CALM")) {
		t.Fatal("an error that only says so is taken for a cut")
	}
}
