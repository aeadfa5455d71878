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

// TestFrozenStreamResetForAnother: net/http gives the connection's
// window back only as a handler reads its body, so a stream whose handler
// stopped reading (/sink) takes all of it while it is alone. Once another
// stream waits for window and none comes back for StallTimeout, the sink
// is reset (ErrStalled), and the other goes on.
func TestFrozenStreamResetForAnother(t *testing.T) {
	_, addr := startNode(t)
	c := dialNode(t, addr, Config{StallTimeout: 200 * time.Millisecond})
	sink, _ := open(t, c, "/sink", nil)
	sunk := make(chan error, 1)
	go func() {
		sink.SetWriteDeadline(time.Now().Add(20 * time.Second))
		_, err := sink.Write(make([]byte, 4<<20))
		sunk <- err
	}()
	for range 1000 { // until the sink holds the whole window
		c.mu.Lock()
		spent := c.send.Window() <= 0
		c.mu.Unlock()
		if spent {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s, _ := open(t, c, "/echo", nil)
	s.SetDeadline(time.Now().Add(10 * time.Second))
	if err := echo(s, 1, 300<<10); err != nil {
		t.Errorf("another stream: %v", err)
	}
	if err := <-sunk; !errors.Is(err, ErrStalled) {
		t.Errorf("the sink: %v, want ErrStalled", err)
	}
	s.Close()
	waitIdle(t, c)
}

// TestLoneStreamPassesItsLimit: a stream alone on its connection may have
// more than StreamSendLimit uncredited: a node that credits a stream only
// once half its window is spent (1 MiB here) would otherwise never see
// enough to credit it, and the stream would stop for good.
func TestLoneStreamPassesItsLimit(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	writeAloneAgainstHalfWindowCredit(t, c, n)
}

// TestLoneSlowStreamNotReset: a node that reads slowly but steadily (8 KiB
// every 100 ms, with the protocol's default 64 KiB connection window) is
// waited for: the only stream on the connection is backpressured, never
// reset as stalled.
func TestLoneSlowStreamNotReset(t *testing.T) {
	c, n, err := newFakeNode(t, Config{StallTimeout: 150 * time.Millisecond}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := n.openOK(c)
	done := make(chan error, 1)
	go func() {
		s.SetWriteDeadline(time.Now().Add(20 * time.Second))
		_, err := s.Write(make([]byte, 100<<10))
		done <- err
	}()
	pending := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the connection's only stream, slow but moving: %v", err)
			}
			return
		case <-tick.C:
			if give := min(pending, 8<<10); give > 0 {
				pending -= give
				n.fr.WriteWindowUpdate(0, uint32(give))
				n.fr.WriteWindowUpdate(s.id, uint32(give))
			}
		default:
		}
		n.nc.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if f, err := n.fr.ReadFrame(); err == nil {
			if d, ok := f.(*http2.DataFrame); ok {
				pending += len(d.Data())
			}
		}
	}
}

// TestStallTimerOnlyWhileWaiting: the stall timer runs only while a
// stream waits for the connection's window, and stops with the
// connection.
func TestStallTimerOnlyWhileWaiting(t *testing.T) {
	c, n, err := newFakeNode(t, Config{StallTimeout: 50 * time.Millisecond}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := n.openOK(c)
	go func() { // the node reads and credits nothing
		for {
			if _, err := n.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := s.Write(make([]byte, 100<<10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write: %v, want its deadline (alone, it is not reset)", err)
	}
	time.Sleep(100 * time.Millisecond)
	c.mu.Lock()
	armed, waiters := c.stall != nil, c.send.ConnWaiters()
	c.mu.Unlock()
	if armed || waiters != 0 {
		t.Errorf("with nobody waiting: stall timer armed %v, %d waiters", armed, waiters)
	}
	s.SetWriteDeadline(time.Now().Add(10 * time.Second))
	go s.Write(make([]byte, 1))
	for range 100 {
		c.mu.Lock()
		armed = c.stall != nil
		c.mu.Unlock()
		if armed {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	c.mu.Lock()
	armed = c.stall != nil
	c.mu.Unlock()
	if armed {
		t.Error("the stall timer outlived the connection")
	}
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

// writeAloneAgainstHalfWindowCredit opens a stream on c and writes 600 KiB
// on it alone, while n takes every byte, gives the connection's window back
// at once and a stream's only once it has taken 512 KiB of it (half its 1
// MiB window, as Go's net/http does): the write must end.
func writeAloneAgainstHalfWindowCredit(t *testing.T, c *Conn, n *fakeNode) {
	t.Helper()
	n.fr.WriteWindowUpdate(0, 16<<20)
	s, _ := n.openOK(c)
	done := make(chan error, 1)
	go func() {
		s.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := s.Write(make([]byte, 600<<10))
		done <- err
	}()
	consumed, credited := 0, 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("write: %v after the node took %d bytes", err, consumed)
			}
			return
		default:
		}
		n.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		f, err := n.fr.ReadFrame()
		if err != nil {
			continue
		}
		if d, ok := f.(*http2.DataFrame); ok {
			consumed += len(d.Data())
			n.fr.WriteWindowUpdate(0, uint32(len(d.Data())))
			if consumed-credited >= 512<<10 {
				n.fr.WriteWindowUpdate(d.StreamID, uint32(consumed-credited))
				credited = consumed
			}
		}
	}
}
