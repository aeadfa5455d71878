package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fakeNode is the server side of a connection, scripted frame by frame
// with the same Framer, for what net/http's server does not do on demand.
type fakeNode struct {
	t    testing.TB
	nc   net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

// newFakeNode connects a client to a fake node that sends settings as its
// preface, and returns the client's handshake result and the node.
func newFakeNode(t testing.TB, cfg Config, settings ...http2.Setting) (*Conn, *fakeNode, error) {
	t.Helper()
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
	t.Cleanup(func() { server.Close() })
	server.SetDeadline(time.Now().Add(20 * time.Second))
	n := &fakeNode{t: t, nc: server, fr: http2.NewFramer(server, server)}
	n.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	n.enc = hpack.NewEncoder(&n.hbuf)
	if err := n.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := testHandshake(ctx, client, cfg)
	if err != nil {
		return nil, n, err
	}
	t.Cleanup(func() { c.Close() })
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(server, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("preface %q %v", preface, err)
	}
	return c, n, nil
}

var xconnect = http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1}

// next reads frames until one satisfies want, and returns it.
func (n *fakeNode) next(want func(http2.Frame) bool) http2.Frame {
	n.t.Helper()
	for {
		f, err := n.fr.ReadFrame()
		if err != nil {
			n.t.Fatalf("fake node: read: %v", err)
		}
		if want(f) {
			return f
		}
	}
}

func (n *fakeNode) nextHeaders() *http2.MetaHeadersFrame {
	n.t.Helper()
	return n.next(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
}

func (n *fakeNode) nextData() *http2.DataFrame {
	n.t.Helper()
	return n.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
}

// respond sends a response header block on stream id, split in fragments
// of at most frag bytes (HEADERS, then CONTINUATION).
func (n *fakeNode) respond(id uint32, frag int, fields ...string) {
	n.t.Helper()
	n.hbuf.Reset()
	for i := 0; i < len(fields); i += 2 {
		n.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	block := n.hbuf.Bytes()
	first := block[:min(frag, len(block))]
	rest := block[len(first):]
	if err := n.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0}); err != nil {
		n.t.Fatal(err)
	}
	for len(rest) > 0 {
		p := rest[:min(frag, len(rest))]
		rest = rest[len(p):]
		if err := n.fr.WriteContinuation(id, len(rest) == 0, p); err != nil {
			n.t.Fatal(err)
		}
	}
}

// openAsync opens a stream in the background; the result arrives on the
// returned channel.
func openAsync(c *Conn, req *Request) chan openResult {
	ch := make(chan openResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, resp, err := c.OpenWebSocket(ctx, req)
		ch <- openResult{s, resp, err}
	}()
	return ch
}

// openOK opens a stream on c, answers it 200 from the node, and returns
// the open stream and the node's view of its HEADERS.
func (n *fakeNode) openOK(c *Conn) (*Stream, *http2.MetaHeadersFrame) {
	n.t.Helper()
	res := openAsync(c, &Request{Authority: "n", Path: "/"})
	hf := n.nextHeaders()
	n.respond(hf.StreamID, 1000, ":status", "200")
	r := <-res
	if r.err != nil {
		n.t.Fatal(r.err)
	}
	return r.s, hf
}

type openResult struct {
	s    *Stream
	resp *Response
	err  error
}

// TestNoExtendedConnect names the missing setting.
func TestNoExtendedConnect(t *testing.T) {
	_, _, err := newFakeNode(t, Config{}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 10})
	if !errors.Is(err, ErrNoExtendedConnect) || !strings.Contains(err.Error(), "SETTINGS_ENABLE_CONNECT_PROTOCOL") {
		t.Fatalf("handshake: %v", err)
	}
}

// TestRequestFields checks the request's header block as the node
// decodes it: the extended CONNECT pseudo-header fields, lowercase names,
// no connection-specific fields, no Sec-WebSocket-Key.
func TestRequestFields(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string][]string{
		"Origin": {"https://app.test"}, "Sec-WebSocket-Version": {"13"}, "Sec-WebSocket-Key": {"k"},
		"Sec-WebSocket-Protocol": {"a, b"}, "Cookie": {"x=1", "y=2"}, "X-Forwarded-For": {"10.0.0.1"},
		"Connection": {"Upgrade, X-Hop"}, "Upgrade": {"websocket"}, "Keep-Alive": {"1"}, "Proxy-Connection": {"x"},
		"Transfer-Encoding": {"chunked"}, "Host": {"h"}, "X-Plugin-User": {"u1"}, "X-Hop": {"named by Connection"},
	}
	res := openAsync(c, &Request{Authority: "node.test:80", Path: "/ws?room=1", Header: h})
	hf := n.nextHeaders()
	got := map[string][]string{}
	for _, f := range hf.Fields {
		got[f.Name] = append(got[f.Name], f.Value)
	}
	want := map[string][]string{
		":method": {"CONNECT"}, ":protocol": {"websocket"}, ":scheme": {"http"}, ":authority": {"node.test:80"}, ":path": {"/ws?room=1"},
		"origin": {"https://app.test"}, "sec-websocket-version": {"13"}, "sec-websocket-protocol": {"a, b"},
		"cookie": {"x=1", "y=2"}, "x-forwarded-for": {"10.0.0.1"}, "x-plugin-user": {"u1"},
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	for k, v := range want {
		if strings.Join(got[k], "|") != strings.Join(v, "|") {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if hf.StreamEnded() {
		t.Error("the request ended the stream")
	}
	n.respond(hf.StreamID, 1000, ":status", "200", "sec-websocket-protocol", "a")
	r := <-res
	if r.err != nil || r.resp.Header.Get("Sec-WebSocket-Protocol") != "a" {
		t.Fatalf("open: %v %+v", r.err, r.resp)
	}
}

// TestInitialWindowChange waits a write for window the node opens with a
// SETTINGS_INITIAL_WINDOW_SIZE change mid-connection, then a
// WINDOW_UPDATE.
func TestInitialWindowChange(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if err != nil {
		t.Fatal(err)
	}
	s, hf := n.openOK(c)
	s.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if k, err := s.Write([]byte("hello world")); k != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write on a zero window: %d %v", k, err)
	}
	s.SetWriteDeadline(time.Time{})
	werr := make(chan error, 1)
	go func() { _, err := s.Write([]byte("hello world")); werr <- err }()
	if err := n.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 5}); err != nil {
		t.Fatal(err)
	}
	// The client applies the settings before it acknowledges them (RFC
	// 9113 section 6.5.3 asks for "as soon as possible"), so the first
	// DATA may come before the ACK or after it.
	var acked bool
	var first []byte
	for !acked || first == nil {
		switch f := n.next(func(http2.Frame) bool { return true }).(type) {
		case *http2.SettingsFrame:
			acked = acked || f.IsAck()
		case *http2.DataFrame:
			if first != nil {
				t.Fatalf("a second DATA %q before the window grew", f.Data())
			}
			first = append([]byte{}, f.Data()...)
		}
	}
	if string(first) != "hello" {
		t.Fatalf("first DATA %q", first)
	}
	n.fr.WriteWindowUpdate(hf.StreamID, 100)
	if d := n.nextData(); string(d.Data()) != " world" {
		t.Fatalf("second DATA %q", d.Data())
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

// TestWriteSplitsFrames keeps every DATA frame within the node's
// SETTINGS_MAX_FRAME_SIZE.
func TestWriteSplitsFrames(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n.fr.WriteWindowUpdate(0, 1<<20)
	st, _ := n.openOK(c)
	const size = 40000
	go st.Write(make([]byte, size))
	for got := 0; got < size; {
		d := n.nextData()
		if len(d.Data()) > defaultMaxFrameSize {
			t.Fatalf("DATA frame of %d bytes", len(d.Data()))
		}
		got += len(d.Data())
	}
}

// TestDataBeyondWindow: DATA beyond a stream's window while the
// connection's holds resets that stream alone with FLOW_CONTROL_ERROR (it
// ended the connection, every other stream with it, where the gateway's
// server side resets the stream), and its reader gets what came before.
func TestDataBeyondWindow(t *testing.T) {
	c, n, err := newFakeNode(t, Config{StreamWindow: 1000}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := n.openOK(c)
	st, hf := n.openOK(c)
	n.fr.WriteData(hf.StreamID, false, make([]byte, 600))
	n.fr.WriteData(hf.StreamID, false, make([]byte, 401))
	rst := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if rst.StreamID != hf.StreamID || rst.ErrCode != http2.ErrCodeFlowControl {
		t.Errorf("RST_STREAM %d %v, want %d FLOW_CONTROL_ERROR", rst.StreamID, rst.ErrCode, hf.StreamID)
	}
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(st)
	var se *StreamError
	if len(b) != 600 || !errors.As(err, &se) || se.Code != http2.ErrCodeFlowControl {
		t.Errorf("the stream: read %d bytes then %v, want 600 then FLOW_CONTROL_ERROR", len(b), err)
	}
	pingAfter(t, c, n)
	if c.Err() != nil || c.Stats().Streams != 1 {
		t.Fatalf("after the stream error: connection %v, %+v", c.Err(), c.Stats())
	}
	other.Abort()
}

// TestResponseHeaderBlocks reads a response header block continued in
// CONTINUATION frames, and refuses one over Config.MaxHeaderBytes while
// the connection goes on.
func TestResponseHeaderBlocks(t *testing.T) {
	c, n, err := newFakeNode(t, Config{MaxHeaderBytes: 8 << 10}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("v", 3000)
	res := openAsync(c, &Request{Authority: "n", Path: "/"})
	hf := n.nextHeaders()
	n.respond(hf.StreamID, 700, ":status", "200", "x-long", long)
	if r := <-res; r.err != nil || r.resp.Header.Get("X-Long") != long {
		t.Fatalf("continued block: %v", r.err)
	}

	res = openAsync(c, &Request{Authority: "n", Path: "/"})
	hf = n.nextHeaders()
	fields := []string{":status", "200"}
	for i := range 5 {
		fields = append(fields, "x-long-"+string(rune('a'+i)), long)
	}
	n.respond(hf.StreamID, 16000, fields...)
	if r := <-res; !errors.Is(r.err, ErrHeaderTooLarge) {
		t.Fatalf("oversized block: %v", r.err)
	}
	n.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	pingAfter(t, c, n)

	// Past the bound, a CONTINUATION is not even decoded: the Framer
	// ends the connection.
	res = openAsync(c, &Request{Authority: "n", Path: "/"})
	hf = n.nextHeaders()
	n.respond(hf.StreamID, 4000, fields...)
	if r := <-res; !errors.Is(r.err, ErrConnLost) {
		t.Fatalf("oversized continued block: %v", r.err)
	}
	if ga := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %v", ga.ErrCode)
	}
}

// pingAfter checks the connection still works: the node answers a ping.
func pingAfter(t *testing.T, c *Conn, n *fakeNode) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := c.Ping(context.Background()); done <- err }()
	p := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	n.fr.WritePing(true, p.Data)
	if err := <-done; err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// TestLateAndUnknownFrames ignores frames on a stream this side reset,
// unknown frame types and PRIORITY, answers the node's PING, and treats
// DATA on a stream never opened as a connection error.
func TestLateAndUnknownFrames(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	st, hf := n.openOK(c)
	st.Abort()
	if rst := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame); rst.ErrCode != http2.ErrCodeCancel {
		t.Errorf("abort sent %v", rst.ErrCode)
	}
	n.fr.WriteData(hf.StreamID, false, []byte("late"))
	n.fr.WriteWindowUpdate(hf.StreamID, 10)
	n.fr.WriteRawFrame(0xfa, 0, 0, []byte("unknown"))
	n.fr.WritePriority(hf.StreamID, http2.PriorityParam{Weight: 1})
	n.fr.WritePing(false, [8]byte{1, 2, 3})
	if p := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame); !p.IsAck() || p.Data != [8]byte{1, 2, 3} {
		t.Errorf("ping answer %v", p)
	}
	pingAfter(t, c, n)
	if st := c.Stats(); st != (Stats{}) {
		t.Errorf("holds %+v", st)
	}

	n.fr.WriteData(99, false, []byte("idle"))
	if ga := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %v", ga.ErrCode)
	}
	<-c.Done()
}

// TestGoAwayRefusesLaterStreams ends the streams above a GOAWAY's last
// stream identifier with REFUSED_STREAM and keeps the ones below.
func TestGoAwayRefusesLaterStreams(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	var streams []*Stream
	for range 2 {
		st, _ := n.openOK(c)
		streams = append(streams, st)
	}
	n.fr.WriteGoAway(streams[0].ID(), http2.ErrCodeNo, nil)
	var se *StreamError
	if _, err := streams[1].Read(make([]byte, 1)); !errors.As(err, &se) || se.Code != http2.ErrCodeRefusedStream {
		t.Fatalf("stream above GOAWAY: %v", err)
	}
	if _, _, err := c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/"}); !errors.Is(err, ErrGoingAway) {
		t.Fatalf("open after GOAWAY: %v", err)
	}
	n.fr.WriteData(streams[0].ID(), true, []byte("still here"))
	if b, err := io.ReadAll(streams[0]); err != nil || string(b) != "still here" {
		t.Fatalf("stream below GOAWAY: %q %v", b, err)
	}
}

// TestHeaderTableSize encodes requests within the node's
// SETTINGS_HEADER_TABLE_SIZE: with 0, a decoder without a dynamic table
// reads every request.
func TestHeaderTableSize(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
	if err != nil {
		t.Fatal(err)
	}
	n.fr.ReadMetaHeaders = hpack.NewDecoder(0, nil)
	for i := range 3 {
		res := openAsync(c, &Request{Authority: "n", Path: "/", Header: map[string][]string{"X-Same": {"value"}}})
		hf := n.nextHeaders()
		var got string
		for _, f := range hf.RegularFields() {
			if f.Name == "x-same" {
				got = f.Value
			}
		}
		if got != "value" {
			t.Fatalf("request %d: x-same %q in %v", i, got, hf.Fields)
		}
		n.respond(hf.StreamID, 1000, ":status", "200")
		if r := <-res; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// TestReceiveBufferBoundedByWindow keeps the stream's buffer from ever
// emptying: the node refills the window each time the reader has taken
// half of it, and the reader takes its next bytes only once they are
// there. What the stream holds must stay within its window, not grow
// with every byte received.
func TestReceiveBufferBoundedByWindow(t *testing.T) {
	const window = 1000
	c, n, err := newFakeNode(t, Config{StreamWindow: window}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	st, hf := n.openOK(c)
	unread := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return st.core.Buffered()
	}
	waitUnread := func(want int) {
		t.Helper()
		for i := 0; unread() < want; i++ {
			if i == 10000 {
				t.Fatalf("the stream holds %d unread bytes, want %d", unread(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := n.fr.WriteData(hf.StreamID, false, make([]byte, window)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, window/2)
	for round := range 200 {
		waitUnread(window)
		if _, err := io.ReadFull(st, buf); err != nil { // half the window: 500 bytes stay unread
			t.Fatal(err)
		}
		wu := n.next(func(f http2.Frame) bool {
			w, ok := f.(*http2.WindowUpdateFrame)
			return ok && w.StreamID == hf.StreamID
		}).(*http2.WindowUpdateFrame)
		if err := n.fr.WriteData(hf.StreamID, false, make([]byte, wu.Increment)); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		held := st.core.BufCap()
		c.mu.Unlock()
		if held > 2*window {
			t.Fatalf("round %d: the stream holds a %d-byte buffer, window %d", round, held, window)
		}
	}
}

// TestResetBeforeNextStream aborts a stream while the next one opens,
// against a node that takes one stream at a time: the node must see the
// old stream's RST_STREAM before the new stream's HEADERS, or it counts
// two streams over its SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 section
// 5.1.2), a PROTOCOL_ERROR that cannot be retried.
func TestResetBeforeNextStream(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, hf := n.openOK(c)
	for i := range 300 {
		prev := hf.StreamID
		go st.Abort()
		res := make(chan openResult, 1)
		go func() {
			for k := 0; ; k++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, resp, err := c.OpenWebSocket(ctx, &Request{Authority: "n", Path: "/"})
				cancel()
				if errors.Is(err, ErrFull) && k < 1_000_000 {
					runtime.Gosched()
					continue
				}
				res <- openResult{s, resp, err}
				return
			}
		}()
		reset := false
		var next *http2.MetaHeadersFrame
		for next == nil {
			switch f := n.next(func(http2.Frame) bool { return true }).(type) {
			case *http2.RSTStreamFrame:
				reset = reset || f.StreamID == prev
			case *http2.MetaHeadersFrame:
				next = f
			}
		}
		if !reset {
			t.Fatalf("round %d: HEADERS of stream %d before the RST_STREAM of stream %d", i, next.StreamID, prev)
		}
		n.respond(next.StreamID, 1000, ":status", "200")
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		st, hf = r.s, next
	}
}

// TestCloseResetsALingeringStream closes a stream whose node never ends
// its side: after the write timeout the stream is reset and no longer
// counted, so such a node cannot hold its places for good.
func TestCloseResetsALingeringStream(t *testing.T) {
	c, n, err := newFakeNode(t, Config{WriteTimeout: 50 * time.Millisecond}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	st, hf := n.openOK(c)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	rst := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if rst.StreamID != hf.StreamID || rst.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("RST_STREAM %d %v, want %d CANCEL", rst.StreamID, rst.ErrCode, hf.StreamID)
	}
	for i := 0; c.Stats().Streams != 0; i++ {
		if i == 10000 {
			t.Fatalf("%d streams counted after the reset", c.Stats().Streams)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStreamErrorOnIdleStream: a frame the Framer rejects as a stream
// error (a WINDOW_UPDATE of 0) on a stream never opened ends the
// connection with PROTOCOL_ERROR instead of a RST_STREAM on an idle
// stream, which the node would have to treat as a connection error.
func TestStreamErrorOnIdleStream(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	n.fr.AllowIllegalWrites = true
	if err := n.fr.WriteWindowUpdate(99, 0); err != nil {
		t.Fatal(err)
	}
	f := n.next(func(f http2.Frame) bool {
		switch f.(type) {
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			return true
		}
		return false
	})
	if ga, ok := f.(*http2.GoAwayFrame); !ok || ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("answer %v, want GOAWAY PROTOCOL_ERROR", f)
	}
	<-c.Done()
}

// waitStreams waits until c counts want streams.
func waitStreams(t *testing.T, c *Conn, want int) {
	t.Helper()
	for i := 0; c.Stats().Streams != want; i++ {
		if i == 10000 {
			t.Fatalf("%d streams counted, want %d", c.Stats().Streams, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestResetKeepsWhatCameBefore pins the loss of a WebSocket's end behind
// HAProxy, which sends a stream's last DATA (the server's close frame),
// END_STREAM, and RST_STREAM(CANCEL) a few microseconds later: the reset
// threw the unread data away, and the reader got the reset instead of the
// node's last bytes. Everything received before a reset must be read, in
// order; after END_STREAM the reset is no error (io.EOF), before it the
// reader gets the reset once the bytes are read.
func TestResetKeepsWhatCameBefore(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ended bool
		code  http2.ErrCode
	}{
		{"after END_STREAM, CANCEL", true, http2.ErrCodeCancel},
		{"after END_STREAM, INTERNAL_ERROR", true, http2.ErrCodeInternal},
		{"after END_STREAM, NO_ERROR", true, http2.ErrCodeNo},
		{"mid-stream, CANCEL", false, http2.ErrCodeCancel},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, n, err := newFakeNode(t, Config{}, xconnect)
			if err != nil {
				t.Fatal(err)
			}
			st, hf := n.openOK(c)
			n.fr.WriteData(hf.StreamID, false, []byte("last message, "))
			n.fr.WriteData(hf.StreamID, tt.ended, []byte("then the close frame"))
			n.fr.WriteRSTStream(hf.StreamID, tt.code)
			waitStreams(t, c, 0) // the reset is in: the stream is no longer counted
			st.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, err := io.ReadAll(st)
			if string(b) != "last message, then the close frame" {
				t.Errorf("read %q before %v", b, err)
			}
			var se *StreamError
			switch {
			case tt.ended && err != nil:
				t.Errorf("after the node's END_STREAM: %v, want io.EOF", err)
			case !tt.ended && (!errors.As(err, &se) || se.Code != tt.code || !se.Remote):
				t.Errorf("mid-stream: %v, want the node's reset", err)
			}
			if _, err := st.Write([]byte("x")); err == nil {
				t.Error("a write after the node's reset succeeded")
			}
			st.Close()
			if s := c.Stats(); s != (Stats{}) {
				t.Errorf("holds %+v", s)
			}
		})
	}
}

// TestCloseRightAfterAccept: a node that accepts a WebSocket and ends it
// at once (its close frame, END_STREAM, then RST_STREAM(CANCEL), as
// HAProxy passes a server's immediate close) gives an open stream whose
// reader gets the close frame, however soon after the response the rest
// arrived: the reset must not turn the accepted WebSocket into a failed
// handshake.
func TestCloseRightAfterAccept(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		res := openAsync(c, &Request{Authority: "n", Path: "/"})
		hf := n.nextHeaders()
		n.respond(hf.StreamID, 1000, ":status", "200")
		n.fr.WriteData(hf.StreamID, true, []byte("close frame"))
		n.fr.WriteRSTStream(hf.StreamID, http2.ErrCodeCancel)
		r := <-res
		if r.err != nil {
			t.Fatalf("open: %v", r.err)
		}
		r.s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(r.s); string(b) != "close frame" || err != nil {
			t.Fatalf("read %q %v", b, err)
		}
		r.s.Close()
	}
	waitStreams(t, c, 0)
}
