package h2serve_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/internal/pollread"
)

// openDetached opens a stream on srv whose Handler answers 200 and
// detaches it, and returns both ends.
func openDetached(t *testing.T) (*h2client.Stream, *h2serve.Stream) {
	t.Helper()
	streams := make(chan *h2serve.Stream, 1)
	srv := &h2serve.Server{Handler: func(s *h2serve.Stream) {
		if err := s.WriteHeader(200, nil); err != nil {
			t.Error(err)
			return
		}
		s.Detach(nil)
		streams <- s
	}}
	hc, err := h2client.Dial(serve(t, srv), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	st, err := hc.Open("/detached", nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _, err := st.Response(ioTimeout); err != nil || status != 200 {
		t.Fatalf("response %d, %v", status, err)
	}
	return st, <-streams
}

// TestPollReadStream reads a detached stream through internal/pollread,
// as the gateway's tunnels read a client's HTTP/2 stream: the reader
// waits with WaitRead, holding no pool buffer, and the stream, once read
// empty, holds no receive buffer either (issue 32).
func TestPollReadStream(t *testing.T) {
	st, s := openDetached(t)
	_ = s.SetReadDeadline(time.Now().Add(ioTimeout))
	r := pollread.NewReader(s, pollread.NewPool(4096))
	type read struct {
		b   string
		err error
	}
	got := make(chan read, 1)
	go func() {
		bp, n, err := r.Read()
		got <- read{string((*bp)[:n]), err}
	}()
	if _, err := st.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.b != "hello" || g.err != nil {
		t.Fatalf("read %q, %v", g.b, g.err)
	}
	if c := h2serve.RecvBufCap(s); c != 0 {
		t.Fatalf("a detached stream read empty holds a %d-byte buffer", c)
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Read(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client's end: %v, want io.EOF", err)
	}
	_ = s.Close()
}

// TestReadBeforeReset pins that what the client sent before it reset its
// stream is read before the reset: a WebSocket close frame followed at
// once by RST_STREAM reaches the tunnel.
func TestReadBeforeReset(t *testing.T) {
	st, s := openDetached(t)
	if _, err := st.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := st.Abort(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reset", func() bool { return s.Err() != nil })
	buf := make([]byte, 64)
	n, err := s.TryRead(buf)
	if string(buf[:n]) != "last words" || err != nil {
		t.Fatalf("first read after the reset: %q, %v", buf[:n], err)
	}
	var se *h2serve.StreamError
	if _, err := s.TryRead(buf); !errors.As(err, &se) || se.Code != http2.ErrCodeCancel || !se.Remote {
		t.Fatalf("second read: %v, want the client's RST_STREAM(CANCEL)", err)
	}
	_ = s.Close()
}
