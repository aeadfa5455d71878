package h2serve_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2serve"
)

// writesFail writes with write until it fails, at most n times, and
// reports whether it failed: the server closed the connection.
func writesFail(c *rawConn, n int, write func(i int) error) bool {
	_ = c.nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	for i := range n {
		if err := write(i); err != nil {
			return true
		}
	}
	return false
}

// TestContinuationFlood pins that a header block that never ends
// (CONTINUATION frames without END_HEADERS, CVE-2024-27316) ends the
// connection, whatever the fragments hold: fields past
// MaxHeaderListSize, hpack table size updates (after a field, where they
// are an hpack error, or from the block's start, where they are allowed
// and decode to nothing: the Framer read those on for good, 64 MiB in
// under a second, until h2core.ReadBudget), or one string longer than the
// limit whose bytes never end. 4,000 frames of 16 KiB (64 MiB) are far
// beyond what any of them may read.
func TestContinuationFlood(t *testing.T) {
	addr := serve(t, &h2serve.Server{MaxHeaderListSize: 8 << 10, Handler: echo})
	literal := headerBlock("x-junk", string(bytes.Repeat([]byte("j"), 1000)))
	fill := func(unit []byte) []byte { return bytes.Repeat(unit, 16000/len(unit)) }
	for _, c := range []struct {
		name string
		frag []byte
	}{
		{"fields", fill(literal)},
		{"table size updates", fill([]byte{0x20})},
		{"table size updates from the start", fill([]byte{0x20})},
		{"one endless string", append([]byte{0x40, 0x7f, 0xff, 0xff, 0xff, 0x0f}, fill([]byte("s"))...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := dialRaw(t, addr, true)
			first := append(headerBlock(":method", "GET", ":scheme", "https", ":authority", "a", ":path", "/"), c.frag[:100]...)
			if c.name == "table size updates from the start" {
				first = c.frag[:100] // where RFC 7541 section 4.2 allows them
			}
			if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first}); err != nil {
				t.Fatal(err)
			}
			frag := c.frag
			if c.name == "one endless string" {
				frag = fill([]byte("s"))
			}
			if !writesFail(rc, 4000, func(int) error { return rc.fr.WriteContinuation(1, false, frag) }) {
				t.Fatal("the server read 64 MiB of one header block without closing the connection")
			}
			// Closed by the server, not a write that timed out while
			// it read slowly.
			_ = rc.nc.SetReadDeadline(time.Now().Add(ioTimeout))
			for range 100 {
				if _, err := rc.fr.ReadFrame(); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Fatalf("the connection is still open: %v", err)
					}
					break
				}
			}
		})
	}
}

// TestControlFlood pins that a client sending PINGs, SETTINGS or
// streams to refuse without reading the answers is cut off
// (ENHANCE_YOUR_CALM) once those answers are over 1 MiB behind what the
// socket took, rather than buffered without bound.
func TestControlFlood(t *testing.T) {
	release := make(chan struct{})
	addr := serve(t, &h2serve.Server{MaxConcurrentStreams: 1, WriteTimeout: 200 * time.Millisecond, Handler: func(s *h2serve.Stream) {
		_ = s.WriteHeader(200, nil)
		<-release // holds the one stream: every later one is refused
	}})
	t.Cleanup(func() { close(release) }) // before serve's, which waits for the connections
	for _, c := range []struct {
		name  string
		write func(rc *rawConn, i int) error
	}{
		{"PING", func(rc *rawConn, _ int) error { return rc.fr.WritePing(false, [8]byte{1}) }},
		{"SETTINGS", func(rc *rawConn, _ int) error { return rc.fr.WriteSettings() }},
		{"refused streams", func(rc *rawConn, i int) error {
			return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 3), BlockFragment: connectBlock, EndHeaders: true})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := dialRaw(t, addr, true)
			if c.name == "refused streams" {
				if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock, EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
			}
			// Never read: the answers fill the socket, then the queue.
			if !writesFail(rc, 3_000_000, func(i int) error { return c.write(rc, i) }) {
				t.Fatal("the server took 3,000,000 frames whose answers went unread without closing the connection")
			}
		})
	}
}
