package h2serve_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/h2serve"
)

const ioTimeout = 10 * time.Second

// serve runs srv on a loopback listener (HTTP/1.1 connections are closed)
// and returns its address.
func serve(t *testing.T, srv *h2serve.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := h2serve.NewListener(ln, srv, time.Second)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		srv.Close()
		waitFor(t, "connections to end", func() bool { return srv.Stats().Conns == 0 })
	})
	return ln.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// echo answers 200 and sends back what it reads.
func echo(s *h2serve.Stream) {
	if err := s.WriteHeader(200, nil); err != nil {
		return
	}
	_, _ = io.Copy(s, s)
}

// TestEcho moves more than a window each way on several streams of one
// connection at once: flow control in both directions.
func TestEcho(t *testing.T) {
	srv := &h2serve.Server{Handler: echo}
	hc, err := h2client.Dial(serve(t, srv), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := hc.Open("/echo", nil)
			if err != nil {
				errs <- err
				return
			}
			if status, _, _, err := st.Response(ioTimeout); err != nil || status != 200 {
				errs <- errors.New("no 200")
				return
			}
			go func() { _, _ = st.Write(payload); _ = st.CloseWrite() }()
			_ = st.SetReadDeadline(time.Now().Add(ioTimeout))
			got, err := io.ReadAll(st)
			if err != nil || !bytes.Equal(got, payload) {
				errs <- errors.New("echo differs")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, "streams to end", func() bool { return srv.Stats().Streams == 0 })
}

// rawConn is a client connection driven frame by frame.
type rawConn struct {
	nc net.Conn
	fr *http2.Framer
}

func dialRaw(t *testing.T, addr string, settings bool) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(ioTimeout))
	c := &rawConn{nc: nc, fr: http2.NewFramer(nc, bufio.NewReader(nc))}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(nc, h2serve.Preface); err != nil {
		t.Fatal(err)
	}
	if settings {
		if err := c.fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// until reads frames until match returns true, and fails the test if the
// connection ends first.
func (c *rawConn) until(t *testing.T, what string, match func(http2.Frame) bool) http2.Frame {
	t.Helper()
	for range 1000 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return f
		}
	}
	t.Fatalf("no %s in 1000 frames", what)
	return nil
}

// goAwayThenEOF reads until GOAWAY, checks its code, then waits for the
// server to close the connection.
func (c *rawConn) goAwayThenEOF(t *testing.T, code http2.ErrCode) {
	t.Helper()
	f := c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if g := f.(*http2.GoAwayFrame); g.ErrCode != code {
		t.Fatalf("GOAWAY %v (%q), want %v", g.ErrCode, g.DebugData(), code)
	}
	for range 1000 {
		if _, err := c.fr.ReadFrame(); err != nil {
			return
		}
	}
	t.Fatal("the connection stayed open after GOAWAY")
}

func headerBlock(kv ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return b.Bytes()
}

var connectBlock = headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a", ":path", "/x")

// TestConnectionErrors pins the answer to a client that breaks the
// protocol: GOAWAY with the error's code, then the connection closes.
func TestConnectionErrors(t *testing.T) {
	addr := serve(t, &h2serve.Server{Handler: echo})
	for _, tc := range []struct {
		name     string
		settings bool // send SETTINGS first
		send     func(c *rawConn) error
		code     http2.ErrCode
	}{
		{"first frame not SETTINGS", false, func(c *rawConn) error { return c.fr.WritePing(false, [8]byte{}) }, http2.ErrCodeProtocol},
		{"DATA on an idle stream", true, func(c *rawConn) error { return c.fr.WriteData(5, false, []byte("x")) }, http2.ErrCodeProtocol},
		{"HEADERS on an even stream", true, func(c *rawConn) error {
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: connectBlock, EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"a stream id going down", true, func(c *rawConn) error {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a", ":path", "/hold"), EndHeaders: true})
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: connectBlock, EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"PUSH_PROMISE", true, func(c *rawConn) error {
			return c.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: connectBlock, EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"connection window overflow", true, func(c *rawConn) error { return c.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"a frame over SETTINGS_MAX_FRAME_SIZE", true, func(c *rawConn) error {
			return c.fr.WriteRawFrame(http2.FrameData, 0, 1, make([]byte, 16385))
		}, http2.ErrCodeFrameSize},
		{"CONTINUATION expected", true, func(c *rawConn) error {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock[:3], EndHeaders: false})
			return c.fr.WritePing(false, [8]byte{})
		}, http2.ErrCodeProtocol},
		{"bad hpack", true, func(c *rawConn) error {
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
		{"invalid setting", true, func(c *rawConn) error {
			return c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, http2.ErrCodeFlowControl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr, tc.settings)
			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			c.goAwayThenEOF(t, tc.code)
		})
	}
}

// TestStreamErrors pins answers that end one stream and keep the
// connection: each case resets its stream, and a PING is answered after.
func TestStreamErrors(t *testing.T) {
	release := make(chan struct{})
	addr := serve(t, &h2serve.Server{MaxHeaderListSize: 1024, Handler: func(s *h2serve.Stream) {
		if s.Request().Path != "/hold" {
			echo(s)
			return
		}
		_ = s.WriteHeader(200, nil)
		<-release // reads nothing: the stream's window runs out
	}})
	t.Cleanup(func() { close(release) })
	c := dialRaw(t, addr, true)
	reset := func(id uint32, code http2.ErrCode) {
		t.Helper()
		f := c.until(t, "RST_STREAM", func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == id })
		if got := f.(*http2.RSTStreamFrame).ErrCode; got != code {
			t.Fatalf("stream %d reset with %v, want %v", id, got, code)
		}
	}
	// Malformed: no :path.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a"), EndHeaders: true})
	reset(1, http2.ErrCodeProtocol)
	// A connection-specific field.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a", ":path", "/", "connection", "close"), EndHeaders: true})
	reset(3, http2.ErrCodeProtocol)
	// DATA past the stream's window.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a", ":path", "/hold"), EndHeaders: true})
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
	for range 5 {
		_ = c.fr.WriteData(5, false, make([]byte, 16384))
	}
	reset(5, http2.ErrCodeFlowControl)
	// A header block over MaxHeaderListSize is answered 431. (A single
	// field longer than it is a COMPRESSION_ERROR of the Framer's hpack
	// decoder, which ends the connection.)
	v := strings.Repeat("b", 300)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a", ":path", "/", "x-1", v, "x-2", v, "x-3", v, "x-4", v), EndHeaders: true})
	f := c.until(t, "the 431", func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 7 })
	if s := f.(*http2.MetaHeadersFrame).PseudoValue("status"); s != "431" {
		t.Fatalf("big header block answered %s", s)
	}
	// A header block in HEADERS and CONTINUATION frames is one request.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, BlockFragment: connectBlock[:4], EndHeaders: false})
	_ = c.fr.WriteContinuation(9, false, connectBlock[4:8])
	_ = c.fr.WriteContinuation(9, true, connectBlock[8:])
	f = c.until(t, "the 200", func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 9 })
	if s := f.(*http2.MetaHeadersFrame).PseudoValue("status"); s != "200" {
		t.Fatalf("CONTINUATION request answered %s", s)
	}
	_ = c.fr.WritePing(false, [8]byte{1, 2, 3})
	c.until(t, "the PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == [8]byte{1, 2, 3}
	})
}

// TestGoAway pins Server.GoAway: open streams go on, a later one is
// refused, and the connection closes when the last stream ends.
func TestGoAway(t *testing.T) {
	srv := &h2serve.Server{Handler: echo}
	hc, err := h2client.Dial(serve(t, srv), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	st, _ := hc.Open("/a", nil)
	if status, _, _, err := st.Response(ioTimeout); err != nil || status != 200 {
		t.Fatalf("response %d %v", status, err)
	}
	srv.GoAway()
	waitFor(t, "GOAWAY", func() bool { return len(hc.GoAways()) == 1 })
	if g := hc.GoAways()[0]; g.LastStreamID != st.ID() || g.Code != http2.ErrCodeNo {
		t.Fatalf("GOAWAY %+v", g)
	}
	late, _ := hc.Open("/b", nil)
	if _, _, _, err := late.Response(ioTimeout); err == nil {
		t.Fatal("a stream after GOAWAY was answered")
	}
	if code, _ := late.Reset(); code != http2.ErrCodeRefusedStream {
		t.Fatalf("late stream reset %v", code)
	}
	_, _ = st.Write([]byte("still"))
	buf := make([]byte, 5)
	_ = st.SetReadDeadline(time.Now().Add(ioTimeout))
	if _, err := io.ReadFull(st, buf); err != nil || string(buf) != "still" {
		t.Fatalf("open stream after GOAWAY: %q %v", buf, err)
	}
	_ = st.CloseWrite()
	select {
	case <-hc.Done():
	case <-time.After(ioTimeout):
		t.Fatal("connection open after its last stream ended")
	}
}

// TestRespond pins a complete answer: status, fields, body, then the
// stream ends (RST_STREAM(NO_ERROR) as the client had not ended it).
func TestRespond(t *testing.T) {
	srv := &h2serve.Server{Handler: func(s *h2serve.Stream) {
		_ = s.Respond(503, http.Header{"Retry-After": {"1"}, "Connection": {"close"}}, []byte("draining"))
	}}
	hc, err := h2client.Dial(serve(t, srv), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	st, _ := hc.Open("/a", nil)
	status, h, body, err := st.Response(ioTimeout)
	if err != nil || status != 503 || string(body) != "draining" || h.Get("Retry-After") != "1" || h.Get("Content-Length") != "8" || h.Get("Connection") != "" {
		t.Fatalf("answer %d %v %q %v", status, h, body, err)
	}
	waitFor(t, "the reset", func() bool { code, ok := st.Reset(); return ok && code == http2.ErrCodeNo })
	waitFor(t, "streams to end", func() bool { return srv.Stats().Streams == 0 })
}

// TestWriterCoalesces pins the connection's one writer: DATA queued by
// many streams at the same moment leaves in fewer writes than frames.
func TestWriterCoalesces(t *testing.T) {
	const n = 50
	start := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(n)
	srv := &h2serve.Server{Handler: func(s *h2serve.Stream) {
		if err := s.WriteHeader(200, nil); err != nil {
			ready.Done()
			return
		}
		ready.Done()
		<-start
		_, _ = s.Write([]byte("fan-out"))
		_, _ = io.Copy(io.Discard, s)
	}}
	hc, err := h2client.Dial(serve(t, srv), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	var streams []*h2client.Stream
	for range n {
		st, err := hc.Open("/fan", nil)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	ready.Wait()
	for _, st := range streams {
		if _, _, _, err := st.Response(ioTimeout); err != nil {
			t.Fatal(err)
		}
	}
	before := srv.Stats()
	close(start)
	for _, st := range streams {
		buf := make([]byte, 7)
		_ = st.SetReadDeadline(time.Now().Add(ioTimeout))
		if _, err := io.ReadFull(st, buf); err != nil {
			t.Fatal(err)
		}
	}
	// The writer counts a write once it has returned, which may be after
	// the client read it: wait for the count (bounded).
	after := srv.Stats()
	for i := 0; i < 500 && after.Frames-before.Frames < n; i++ {
		time.Sleep(10 * time.Millisecond)
		after = srv.Stats()
	}
	frames, writes := after.Frames-before.Frames, after.Writes-before.Writes
	t.Logf("%d DATA frames from %d streams in %d writes (%.1f frames per write)", frames, n, writes, float64(frames)/float64(writes))
	if frames < n || writes >= frames {
		t.Fatalf("%d frames in %d writes: nothing coalesced", frames, writes)
	}
}

// TestRespondWithoutWindow pins that an answer whose body finds no send
// window (the client's SETTINGS_INITIAL_WINDOW_SIZE is 0 and it never
// grants more) gives up after WriteTimeout and resets its stream, rather
// than holding its goroutine and its place for good.
func TestRespondWithoutWindow(t *testing.T) {
	srv := &h2serve.Server{WriteTimeout: 200 * time.Millisecond, Handler: func(s *h2serve.Stream) {
		_ = s.Respond(503, nil, []byte("draining"))
	}}
	c := dialRaw(t, serve(t, srv), false)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock, EndHeaders: true})
	f := c.until(t, "the reset", func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == 1 })
	if code := f.(*http2.RSTStreamFrame).ErrCode; code != http2.ErrCodeCancel {
		t.Fatalf("reset %v, want CANCEL", code)
	}
	waitFor(t, "streams to end", func() bool { return srv.Stats().Streams == 0 })
}

// TestDetach pins a detached stream: its Handler returns and the stream
// stays open; onReadable tells of DATA and of the client's end, TryRead
// takes what is buffered without waiting, Write still sends, and Close
// ends it.
func TestDetach(t *testing.T) {
	readable := make(chan struct{}, 1)
	streams := make(chan *h2serve.Stream, 1)
	srv := &h2serve.Server{Handler: func(s *h2serve.Stream) {
		if err := s.WriteHeader(200, nil); err != nil {
			t.Error(err)
			return
		}
		s.Detach(func() {
			select {
			case readable <- struct{}{}:
			default:
			}
		})
		streams <- s
	}}
	hc, err := h2client.Dial(serve(t, srv), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	st, err := hc.Open("/detached", nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _, err := st.Response(ioTimeout); err != nil || status != 200 {
		t.Fatalf("response %d, %v", status, err)
	}
	s := <-streams
	if s.Request() != nil {
		t.Fatal("a detached stream still holds its request")
	}
	buf := make([]byte, 64)
	if n, err := s.TryRead(buf); n != 0 || err != nil {
		t.Fatalf("TryRead with nothing sent = %d, %v", n, err)
	}
	if _, err := st.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < 5 {
		select {
		case <-readable:
		case <-time.After(ioTimeout):
			t.Fatal("no readiness call for DATA")
		}
		n, err := s.TryRead(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "hello" {
		t.Fatalf("read %q", got)
	}
	_ = s.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := s.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	_ = st.SetReadDeadline(time.Now().Add(ioTimeout))
	if _, err := io.ReadFull(st, buf[:4]); err != nil || string(buf[:4]) != "back" {
		t.Fatalf("client read %q, %v", buf[:4], err)
	}
	select {
	case <-readable: // a call for DATA already read
	default:
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client's end", func() bool {
		_, err := s.TryRead(buf)
		return errors.Is(err, io.EOF)
	})
	select {
	case <-readable:
	default:
		t.Fatal("no readiness call for the client's end")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream to end", func() bool { return st.Ended() && srv.Stats().Streams == 0 })
}
