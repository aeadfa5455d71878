package h2

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestStreamSendLimitKeepsConnWindow: net/http gives the connection's
// window back only as a handler reads its body, so a stream whose handler
// stopped reading (/sink) would hold all of it. It holds at most
// Config.StreamSendLimit, and another stream goes on.
func TestStreamSendLimitKeepsConnWindow(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	sink, _ := open(t, c, "/sink", nil)
	sink.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	n, err := sink.Write(make([]byte, 4<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n > 64<<10 {
		t.Fatalf("a stream nobody reads took %d bytes (%v), want at most 64 KiB then the deadline", n, err)
	}
	s, _ := open(t, c, "/echo", nil)
	s.SetDeadline(time.Now().Add(10 * time.Second))
	if err := echo(s, 1, 300<<10); err != nil {
		t.Errorf("another stream: %v", err)
	}
	sink.Abort()
	s.Close()
	waitIdle(t, c)
}

// TestStallResetsTheWorstStream: streams nobody reads that together hold
// the node's whole connection window (1 MiB on net/http) are reset, the
// one holding most first, until the others flow; each reset one ends
// with ErrStalled.
func TestStallResetsTheWorstStream(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{StreamSendLimit: 300 << 10, StallTimeout: 100 * time.Millisecond})
	var sinks []*Stream
	var wg sync.WaitGroup
	for range 5 { // 5 x 300 KiB > 1 MiB
		sink, _ := open(t, c, "/sink", nil)
		sinks = append(sinks, sink)
		wg.Go(func() {
			sink.SetWriteDeadline(time.Now().Add(20 * time.Second))
			sink.Write(make([]byte, 300<<10))
		})
	}
	time.Sleep(200 * time.Millisecond)
	s, _ := open(t, c, "/echo", nil)
	s.SetDeadline(time.Now().Add(10 * time.Second))
	if err := echo(s, 2, 100<<10); err != nil {
		t.Errorf("another stream while the window was held: %v", err)
	}
	s.Close()
	wg.Wait()
	stalled := 0
	for _, sink := range sinks {
		sink.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := sink.Read(make([]byte, 1)); errors.Is(err, ErrStalled) {
			stalled++
		}
		sink.Abort()
	}
	if stalled == 0 {
		t.Error("no stream was reset with ErrStalled")
	}
	waitIdle(t, c)
}

// TestRequestTooLarge refuses, before sending it, a request larger than
// the node's SETTINGS_MAX_HEADER_LIST_SIZE, which net/http would answer
// by ending the connection and every stream on it.
func TestRequestTooLarge(t *testing.T) {
	_, addr := startNode(t, "-max-header-bytes", "2048")
	c := dialNode(t, addr, Config{})
	established, _ := open(t, c, "/echo", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.OpenWebSocket(ctx, &Request{Authority: "n", Path: "/echo", Header: http.Header{"Cookie": {"a=" + strings.Repeat("x", 6000)}}})
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("a 6 KB cookie: %v, want ErrRequestTooLarge", err)
	}
	established.SetDeadline(time.Now().Add(10 * time.Second))
	if err := echo(established, 3, 1000); err != nil || c.Err() != nil {
		t.Fatalf("the established stream: %v; connection %v", err, c.Err())
	}
	// Just under the limit goes.
	s, resp := open(t, c, "/echo", http.Header{"Cookie": {"a=" + strings.Repeat("x", 1500)}})
	if s == nil {
		t.Fatalf("a 1.5 KB cookie: %d", resp.Status)
	}
	s.Close()
	established.Close()
	waitIdle(t, c)
}

// TestTimeoutClosesNotResets: a request whose answer does not come within
// the caller's time is ended with END_STREAM, not RST_STREAM, and stays
// counted until the node ends it: a node that counts streams reset before
// its handler returns (net/http, against rapid resets) must not see one.
func TestTimeoutClosesNotResets(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := c.OpenWebSocket(ctx, &Request{Authority: "n", Path: "/"})
		done <- err
	}()
	hf := n.nextHeaders()
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open: %v", err)
	}
	f := n.next(func(f http2.Frame) bool {
		switch f.(type) {
		case *http2.DataFrame, *http2.RSTStreamFrame:
			return true
		}
		return false
	})
	if d, ok := f.(*http2.DataFrame); !ok || !d.StreamEnded() || d.StreamID != hf.StreamID {
		t.Fatalf("after the timeout the node got %v, want END_STREAM on stream %d", f, hf.StreamID)
	}
	if st := c.Stats(); st.Streams != 1 {
		t.Fatalf("stats %+v: the stream must stay counted until the node ends it", st)
	}
	n.respond(hf.StreamID, 1000, ":status", "200")
	if err := n.fr.WriteData(hf.StreamID, true, nil); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if c.Stats().Streams == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("stats %+v after the node ended the stream", c.Stats())
}

// TestSetNoStreams: a node whose SETTINGS_MAX_CONCURRENT_STREAMS is 0
// gives ErrNoStreams after one dial per Open, and no connection is kept.
func TestSetNoStreams(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				fr := http2.NewFramer(nc, nc)
				fr.WriteSettings(xconnect, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0})
				for {
					if _, err := fr.ReadFrame(); err != nil {
						return
					}
				}
			}()
		}
	}()
	var dials atomic.Int32
	s := newSet(t, ln.Addr().String(), 2, &dials)
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := s.Open(ctx, &Request{Authority: "n", Path: "/"})
		cancel()
		if !errors.Is(err, ErrNoStreams) {
			t.Fatalf("open: %v, want ErrNoStreams", err)
		}
	}
	if n, st := dials.Load(), s.Stats(); n != 5 || st.Conns != 0 {
		t.Errorf("%d dials for 5 opens, set %+v: want 5 and none kept", n, st)
	}
}

// TestWaitRead: WaitRead returns once bytes are there (a Read then does
// not block), at the read deadline, and once the stream ended.
func TestWaitRead(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{})
	s, _ := open(t, c, "/echo", nil)
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := s.WaitRead(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle: %v, want the deadline", err)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitRead(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if n, err := s.Read(buf); err != nil || n == 0 {
		t.Fatalf("read after WaitRead: %d %v", n, err)
	}
	s.Abort()
	if err := s.WaitRead(); err != nil {
		t.Fatalf("after Abort: %v, want a Read that does not block", err)
	}
	if _, err := s.Read(buf); err == nil {
		t.Fatal("read after Abort succeeded")
	}
}
