package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// startNode runs internal/stdnode, net/http's HTTP/2 server with extended
// CONNECT enabled, and returns it with its address once it accepts.
func startNode(t *testing.T, args ...string) (*testproc.Proc, string) {
	t.Helper()
	addr := testproc.FreeAddr(t)
	return startNodeAt(t, addr, args...), addr
}

// startNodeAt runs internal/stdnode on addr and returns it once it
// accepts.
func startNodeAt(t *testing.T, addr string, args ...string) *testproc.Proc {
	t.Helper()
	bin := testproc.Build(t, "./gateway/internal/upstream/h2/internal/stdnode")
	cmd := exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	// net/http reads http2xconnect once, at init, from its environment.
	cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
	p := testproc.StartCmd(t, "stdnode", cmd)
	for range 1000 {
		nc, err := net.Dial("tcp", addr)
		if err == nil {
			nc.Close()
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("stdnode did not listen on %s:\n%s", addr, p.Output())
	return nil
}

// dialNode opens an HTTP/2 connection to addr, closed when the test ends.
func dialNode(t *testing.T, addr string, cfg Config) *Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := testHandshake(ctx, nc, cfg)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func open(t *testing.T, c *Conn, path string, h http.Header) (*Stream, *Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, resp, err := c.OpenWebSocket(ctx, &Request{Authority: "node.test", Path: path, Header: h})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return s, resp
}

// waitIdle polls until the connection holds no stream and no buffered
// byte: everything a stream holds returns to zero when it ends.
func waitIdle(t *testing.T, c *Conn) {
	t.Helper()
	var st Stats
	for range 1000 {
		if st = c.Stats(); st == (Stats{}) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("connection still holds %+v", st)
}

// TestEchoManyStreams runs many WebSockets at once on one connection to
// net/http's server, each echoing more than its window, and checks every
// byte, the request fields the node saw and the response fields it chose.
func TestEchoManyStreams(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	const streams, size = 24, 300 << 10
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		h := http.Header{}
		h.Set("Origin", "https://app.test")
		h.Set("Sec-WebSocket-Version", "13")
		h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		h.Set("Sec-WebSocket-Protocol", "chat.v2, chat.v1")
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", "websocket")
		s, resp := open(t, c, "/echo", h)
		if resp.Status != 200 || resp.Header.Get("Sec-WebSocket-Protocol") != "chat.v2" ||
			resp.Header.Get("X-Seen-Origin") != "https://app.test" || resp.Header.Get("X-Seen-Version") != "13" ||
			resp.Header.Get("X-Seen-Key") != "" {
			t.Fatalf("response %d %v", resp.Status, resp.Header)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- echo(s, i, size)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if _, err := c.Ping(context.Background()); err != nil {
		t.Errorf("ping: %v", err)
	}
	waitIdle(t, c)
}

// echo writes size bytes in uneven chunks on s while reading them back,
// then closes its side and expects the node's END_STREAM.
func echo(s *Stream, seed, size int) error {
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + seed)
	}
	werr := make(chan error, 1)
	go func() {
		for p := want; len(p) > 0; {
			n := min(len(p), 1+(len(p)*13+seed*1000)%40000)
			if _, err := s.Write(p[:n]); err != nil {
				werr <- err
				return
			}
			p = p[n:]
		}
		werr <- s.CloseWrite()
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		return fmt.Errorf("stream %d: read: %w", s.ID(), err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("stream %d: write: %w", s.ID(), err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("stream %d: echoed %d bytes, not the %d written", s.ID(), len(got), len(want))
	}
	return s.Close()
}

// TestStalledReaderDoesNotStallOthers opens streams whose node sends
// without end and never reads them: the node's senders block on those
// streams' windows alone, so what is buffered for each stays within its
// window while together they hold more than the connection window, and
// another stream echoes meanwhile.
func TestStalledReaderDoesNotStallOthers(t *testing.T) {
	_, addr := startNode(t)
	cfg := Config{StreamWindow: 64 << 10, ConnWindow: 256 << 10}
	c := dialNode(t, addr, cfg)
	const stalled = 5
	var streams []*Stream
	for range stalled {
		s, _ := open(t, c, "/source", nil)
		streams = append(streams, s)
	}
	full := stalled * int(cfg.StreamWindow)
	for range 1000 {
		if c.Stats().Buffered >= full {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b := c.Stats().Buffered; b != full {
		t.Fatalf("buffered for %d stalled streams: %d bytes, want their windows' %d (more than the connection window)", stalled, b, full)
	}
	s, _ := open(t, c, "/echo", nil)
	s.SetDeadline(time.Now().Add(time.Minute)) // a failure, not a hang
	if err := echo(s, 1, 2<<20); err != nil {
		t.Fatal(err)
	}
	if b := c.Stats().Buffered; b != full {
		t.Errorf("buffered for the stalled streams after the echo: %d bytes, want %d", b, full)
	}
	for _, s := range streams {
		s.Abort()
	}
	waitIdle(t, c)
}

// TestMaxConcurrentStreams checks that the node's
// SETTINGS_MAX_CONCURRENT_STREAMS gives ErrFull, and that a stream's end
// makes room again.
func TestMaxConcurrentStreams(t *testing.T) {
	_, addr := startNode(t, "-max-streams", "2")
	c := dialNode(t, addr, Config{})
	a, _ := open(t, c, "/echo", nil)
	b, _ := open(t, c, "/echo", nil)
	if _, _, err := c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/echo"}); !errors.Is(err, ErrFull) {
		t.Fatalf("third stream: %v, want ErrFull", err)
	}
	a.Close()
	var err error
	for range 1000 {
		var s *Stream
		if s, _, err = c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/echo"}); err == nil {
			s.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no room after a stream ended: %v", err)
	}
	b.Close()
	waitIdle(t, c)
}

// TestDenied passes the node's 403 and its body back.
func TestDenied(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	s, resp := open(t, c, "/deny", nil)
	if s != nil || resp.Status != 403 || !bytes.Contains(resp.Body, []byte("denied by the node")) {
		t.Fatalf("stream %v, response %d %q", s, resp.Status, resp.Body)
	}
	waitIdle(t, c)
}

// TestMaxBody keeps only Config.MaxBody bytes of a refusal's body.
func TestMaxBody(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{MaxBody: 5})
	_, resp := open(t, c, "/deny", nil)
	if resp.Status != 403 || string(resp.Body) != "denie" {
		t.Fatalf("response %d %q", resp.Status, resp.Body)
	}
	waitIdle(t, c)
}

// TestNodeKilled gives every stream the connection-lost error when the
// node's process dies.
func TestNodeKilled(t *testing.T) {
	p, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	var streams []*Stream
	for range 5 {
		s, _ := open(t, c, "/echo", nil)
		streams = append(streams, s)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		if _, err := s.Read(make([]byte, 10)); !errors.Is(err, ErrConnLost) || errors.Is(err, ErrStreamReset) {
			t.Errorf("stream %d: read %v, want ErrConnLost", s.ID(), err)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, ErrConnLost) {
			t.Errorf("stream %d: write %v, want ErrConnLost", s.ID(), err)
		}
	}
	<-c.Done()
	if _, _, err := c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/echo"}); !errors.Is(err, ErrConnLost) {
		t.Errorf("open after loss: %v", err)
	}
	waitIdle(t, c)
}

// TestNodeReset gives a stream the node reset a *StreamError, not the
// connection-lost error, while another stream goes on.
func TestNodeReset(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	other, _ := open(t, c, "/echo", nil)
	s, _ := open(t, c, "/reset", nil)
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read(make([]byte, 10))
	var se *StreamError
	if !errors.As(err, &se) || !se.Remote || !errors.Is(err, ErrStreamReset) || errors.Is(err, ErrConnLost) {
		t.Fatalf("read: %v, want a reset by the node", err)
	}
	if err := echo(other, 2, 100<<10); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c)
}

// TestGoAway shuts the node down gracefully: it sends GOAWAY, after which
// no stream opens, the open one keeps echoing, and the connection ends
// when it is done.
func TestGoAway(t *testing.T) {
	p, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	s, _ := open(t, c, "/echo", nil)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 1000 {
		var r *Response
		// Before the GOAWAY arrives a stream opens and is refused or denied.
		if _, r, err = c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/deny"}); errors.Is(err, ErrGoingAway) {
			break
		}
		if err == nil && r.Status != 403 {
			t.Fatalf("status %d", r.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err, ErrGoingAway) {
		t.Fatalf("open after GOAWAY: %v", err)
	}
	if err := echo(s, 3, 100<<10); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if code, err := p.Wait(10 * time.Second); code != 0 || err != nil {
		t.Errorf("node exit %d %v", code, err)
	}
	waitIdle(t, c)
}

// TestWriteDeadlineOnSpentWindow writes to a node that never reads: the
// write waits for window until its deadline, and the stream can still be
// aborted.
func TestWriteDeadlineOnSpentWindow(t *testing.T) {
	_, addr := startNode(t, "-stream-buffer", "65536")
	c := dialNode(t, addr, Config{})
	s, _ := open(t, c, "/sink", nil)
	s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := s.Write(make([]byte, 4<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= 4<<20 {
		t.Fatalf("write: %d bytes, %v; want the deadline", n, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%v is not a net.Error timeout", err)
	}
	s.Abort()
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after abort: %v", err)
	}
	waitIdle(t, c)
}

// TestReadDeadline bounds a Read that nothing answers.
func TestReadDeadline(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	s, _ := open(t, c, "/echo", nil)
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v", err)
	}
	s.SetReadDeadline(time.Time{})
	if err := echo(s, 4, 1000); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c)
}

// TestShutdown waits for the open stream to end, then closes the
// connection; no stream opens meanwhile.
func TestShutdown(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	s, _ := open(t, c, "/echo", nil)
	done := make(chan error, 1)
	go func() { done <- c.Shutdown(context.Background()) }()
	var err error
	for range 1000 {
		var early *Stream
		if early, _, err = c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/echo"}); errors.Is(err, ErrGoingAway) {
			break
		}
		if early != nil { // opened before Shutdown began
			early.Close()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err, ErrGoingAway) {
		t.Fatalf("open during shutdown: %v", err)
	}
	if err := echo(s, 5, 100<<10); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	<-c.Done()
	waitIdle(t, c)
}
