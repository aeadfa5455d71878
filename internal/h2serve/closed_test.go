package h2serve_test

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2serve"
)

// pingRoundTrip sends a PING and reads until its ACK, so that every frame
// sent before it has been handled.
func pingRoundTrip(t *testing.T, c *rawConn, data [8]byte) {
	t.Helper()
	if err := c.fr.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	for range 100_000 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the PING ack: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY %v (%q) before the PING ack", g.ErrCode, g.DebugData())
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == data {
			return
		}
	}
	t.Fatal("no PING ack in 100,000 frames")
}

// TestFramesOnClosedStreams pins RFC 9113 section 5.1 for frames on
// streams that are no longer open. Trailers (HEADERS with END_STREAM) on
// a stream this side reset ended the whole connection (PROTOCOL_ERROR):
// they, and DATA, are ignored now, as the client sent them before it saw
// the reset. DATA on a stream that ended otherwise was ignored: it is
// answered RST_STREAM(STREAM_CLOSED). A stream that depends on itself, and
// DATA off the request's content-length, reset the stream
// (PROTOCOL_ERROR), also once answered in full, and so does a
// WINDOW_UPDATE past 2^31-1 (FLOW_CONTROL_ERROR), also once a refused
// CONNECT was reset (NO_ERROR). A request answered before the client
// ended it stays open until it does: no reset. The connection goes on
// through all of them.
func TestFramesOnClosedStreams(t *testing.T) {
	srv := &h2serve.Server{Handler: func(s *h2serve.Stream) {
		switch s.Request().Path {
		case "/reset":
			return // no response: the stream is reset (INTERNAL_ERROR)
		case "/hold":
			_, _ = io.Copy(io.Discard, s) // until the stream is reset
			return
		case "/refuse":
			_ = s.Respond(404, nil, []byte("no"))
			return
		}
		_ = s.Respond(200, nil, []byte("ok"))
	}}
	c := dialRaw(t, serve(t, srv), true)
	post := func(path, length string) []byte {
		return headerBlock(":method", "POST", ":scheme", "http", ":authority", "a", ":path", path, "content-length", length)
	}
	reset := func(id uint32, code http2.ErrCode) {
		t.Helper()
		f := c.until(t, fmt.Sprintf("RST_STREAM on %d", id), func(f http2.Frame) bool {
			if g, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("GOAWAY %v (%q)", g.ErrCode, g.DebugData())
			}
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id
		})
		if got := f.(*http2.RSTStreamFrame).ErrCode; got != code {
			t.Fatalf("stream %d reset with %v, want %v", id, got, code)
		}
	}
	// Stream 1: reset by the server; the client's trailers and DATA
	// that follow are ignored.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: post("/reset", "4"), EndHeaders: true})
	reset(1, http2.ErrCodeInternal)
	_ = c.fr.WriteData(1, false, []byte("ab"))
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("x-trailer", "1"), EndHeaders: true, EndStream: true})
	pingRoundTrip(t, c, [8]byte{1})
	// Stream 3: answered and ended both ways; DATA after it is
	// STREAM_CLOSED.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: headerBlock(":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/"), EndHeaders: true, EndStream: true})
	c.until(t, "stream 3's end", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 3 && d.StreamEnded()
	})
	_ = c.fr.WriteData(3, true, []byte("late"))
	reset(3, http2.ErrCodeStreamClosed)
	// Streams 5 and 7: depending on themselves.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: post("/", "0"), EndHeaders: true, EndStream: true,
		Priority: http2.PriorityParam{StreamDep: 5, Weight: 1}})
	reset(5, http2.ErrCodeProtocol)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: post("/hold", "4"), EndHeaders: true})
	_ = c.fr.WritePriority(7, http2.PriorityParam{StreamDep: 7, Weight: 1})
	reset(7, http2.ErrCodeProtocol)
	// Streams 9, 11 and 13: DATA short of, or beyond, the content-length,
	// and content-lengths that disagree.
	// Their handler reads the body.
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, BlockFragment: post("/hold", "4"), EndHeaders: true})
	_ = c.fr.WriteData(9, true, []byte("abc"))
	reset(9, http2.ErrCodeProtocol)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 11, BlockFragment: post("/hold", "2"), EndHeaders: true})
	_ = c.fr.WriteData(11, false, []byte("abc"))
	reset(11, http2.ErrCodeProtocol)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 13, BlockFragment: append(post("/x", "2"), headerBlock("content-length", "3")...), EndHeaders: true})
	reset(13, http2.ErrCodeProtocol)
	// Streams 15, 17 and 19: answered in full at once, before the
	// client ended them, they stay open until it does (half-closed
	// (local)): the body is still checked against its content-length,
	// valid trailers end the stream, a WINDOW_UPDATE past 2^31-1 is a
	// stream error (RFC 9113 section 6.9.1), as h2spec's 6.9.1/3
	// expects (it failed when an early answer's reset came first).
	answered := func(id uint32) {
		t.Helper()
		c.until(t, fmt.Sprintf("stream %d's answer", id), func(f http2.Frame) bool {
			if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == id {
				t.Fatalf("stream %d answered early was reset (%v)", id, r.ErrCode)
			}
			d, ok := f.(*http2.DataFrame)
			return ok && d.StreamID == id && d.StreamEnded()
		})
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 15, BlockFragment: post("/", "4"), EndHeaders: true})
	answered(15)
	_ = c.fr.WriteData(15, true, []byte("abc"))
	reset(15, http2.ErrCodeProtocol)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 17, BlockFragment: post("/", "4"), EndHeaders: true})
	answered(17)
	_ = c.fr.WriteData(17, false, []byte("abcd"))
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 17, BlockFragment: headerBlock("x-trailer", "1"), EndHeaders: true, EndStream: true})
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 19, BlockFragment: post("/", "4"), EndHeaders: true})
	answered(19)
	_ = c.fr.WriteWindowUpdate(19, 1<<31-1)
	_ = c.fr.WriteWindowUpdate(19, 1<<31-1)
	reset(19, http2.ErrCodeFlowControl)
	// Stream 21: a CONNECT refused is reset at once (NO_ERROR); the
	// WINDOW_UPDATEs the client sent before it saw the reset are still
	// checked.
	connect := headerBlock(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a", ":path", "/refuse")
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 21, BlockFragment: connect, EndHeaders: true})
	reset(21, http2.ErrCodeNo)
	_ = c.fr.WriteWindowUpdate(21, 1<<31-1)
	_ = c.fr.WriteWindowUpdate(21, 1<<31-1)
	reset(21, http2.ErrCodeFlowControl)
	pingRoundTrip(t, c, [8]byte{2})
}

// TestMalformedRequestReported pins Server.Malformed: a request whose
// content-length fields disagree is reset PROTOCOL_ERROR before any
// Handler runs, and reported with its reason, so that the server's user
// can count it as the client's bad request; a well-formed one is not
// reported. Before, nothing told the user of it.
func TestMalformedRequestReported(t *testing.T) {
	reasons := make(chan string, 4)
	srv := &h2serve.Server{
		Handler:   func(s *h2serve.Stream) { _ = s.Respond(200, nil, nil) },
		Malformed: func(reason string) { reasons <- reason },
	}
	c := dialRaw(t, serve(t, srv), true)
	post := headerBlock(":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/x", "content-length", "2", "content-length", "3")
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: post, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	rst := c.until(t, "stream 1's reset", func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("RST_STREAM %d %v, want 1 PROTOCOL_ERROR", rst.StreamID, rst.ErrCode)
	}
	select {
	case r := <-reasons:
		if !strings.Contains(r, "content-length") {
			t.Fatalf("reported %q", r)
		}
	default:
		t.Fatal("the malformed request was not reported")
	}
	get := headerBlock(":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/x")
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: get, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	c.until(t, "stream 3's answer", func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 3 })
	if len(reasons) != 0 {
		t.Fatalf("a well-formed request was reported: %q", <-reasons)
	}
}
