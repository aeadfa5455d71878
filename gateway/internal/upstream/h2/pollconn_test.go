package h2

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"
)

// testPolled, set by WSGATE_H2_POLL=1 (make test runs the package both
// ways), has the tests' connections read by goroutinePoller instead of
// their own reader goroutine, so that PollRead and its framing meet every
// node the tests build.
var testPolled = os.Getenv("WSGATE_H2_POLL") == "1"

// testHandshake is Handshake, polled when testPolled.
func testHandshake(ctx context.Context, nc net.Conn, cfg Config) (*Conn, error) {
	if testPolled {
		return HandshakePolled(ctx, nc, cfg, goroutinePoller)
	}
	return Handshake(ctx, nc, cfg)
}

// goroutinePoller is a Poller for the tests: one goroutine per connection
// calls PollRead each time the runtime's poller finds a duplicate of its
// socket readable, as a tunnel poller does with epoll.
func goroutinePoller(nc net.Conn, c *Conn) (any, func()) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	fd := -1
	raw.Control(func(s uintptr) { fd, _ = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if fd < 0 {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), "polled")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil
	}
	go func() {
		rc.Read(func(fd uintptr) bool {
			ok, more := c.PollRead(int(fd), true)
			for ok && more {
				ok, more = c.PollRead(int(fd), true)
			}
			return !ok
		})
		// Ended, or let go of (the deadline below): close, then say so.
		f.Close()
		c.PollDetached(nil)
	}()
	var once sync.Once
	return "test poller", func() { once.Do(func() { f.SetReadDeadline(time.Unix(1, 0)) }) }
}

// TestFrameGroupEnd checks where PollRead cuts what it read into what the
// Framer reads at once.
func TestFrameGroupEnd(t *testing.T) {
	frame := func(typ http2.FrameType, flags http2.Flags, length int) []byte {
		b := []byte{byte(length >> 16), byte(length >> 8), byte(length), byte(typ), byte(flags), 0, 0, 0, 1}
		return append(b, make([]byte, length)...)
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	data := frame(http2.FrameData, 0, 10)
	open := frame(http2.FrameHeaders, 0, 5)
	cont := frame(http2.FrameContinuation, 0, 3)
	last := frame(http2.FrameContinuation, http2.FlagContinuationEndHeaders, 2)
	for _, c := range []struct {
		name      string
		b         []byte
		end, need int
	}{
		{"empty", nil, 0, 9},
		{"half a header", data[:4], 0, 9},
		{"header only", data[:9], 0, 19},
		{"one frame", data, 19, 0},
		{"a frame and part of the next", cat(data, data[:3]), 19, 0},
		{"headers with END_HEADERS", frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 5), 14, 0},
		{"headers waiting for continuations", open, 0, 14 + 9},
		{"headers and one continuation of two", cat(open, cont), 0, 14 + 12 + 9},
		{"headers and continuations to END_HEADERS", cat(open, cont, last, data), 14 + 12 + 11, 0},
		{"headers then another frame: the Framer refuses it", cat(open, data), 14 + 19, 0},
		{"a frame over the size limit: its header alone", frame(http2.FrameData, 0, defaultMaxFrameSize+1)[:9], 9, 0},
		{"a continuation over the size limit", cat(open, frame(http2.FrameContinuation, 0, defaultMaxFrameSize+1)[:9]), 14 + 9, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			end, need := frameGroupEnd(c.b)
			if end != c.end || need != c.need {
				t.Errorf("frameGroupEnd = %d, %d; want %d, %d", end, need, c.end, c.need)
			}
		})
	}
}

// TestPolledConnEcho runs streams over a polled connection whatever
// testPolled says, against Go's own HTTP/2 server, and checks that the
// poller lets go of the connection when it closes.
func TestPolledConnEcho(t *testing.T) {
	_, addr := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := HandshakePolled(ctx, nc, Config{}, goroutinePoller)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Polled() {
		t.Fatal("the connection is not polled")
	}
	for i := range 4 {
		s, resp := open(t, c, "/echo", nil)
		if resp.Status != 200 {
			t.Fatalf("open: %d", resp.Status)
		}
		// 40,000 bytes: several DATA frames each way, split across reads.
		if err := echo(s, i, 40000); err != nil {
			t.Fatal(err)
		}
	}
	idle, _ := open(t, c, "/echo", nil)
	c.Close()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed: the poller did not let go")
	}
	if _, err := idle.Write([]byte("late")); !errors.Is(err, ErrConnLost) {
		t.Fatalf("write after close: %v, want ErrConnLost", err)
	}
}
