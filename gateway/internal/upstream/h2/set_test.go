package h2

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// newSet is a set of size connections to addr that counts its dials.
func newSet(t *testing.T, addr string, size int, dials *atomic.Int32) *Set {
	t.Helper()
	s := &Set{
		Size: size,
		Dial: func(ctx context.Context) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
	}
	t.Cleanup(s.Close)
	return s
}

func setOpen(t *testing.T, s *Set, path string) *Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, resp, err := s.Open(ctx, &Request{Authority: "node.test", Path: path})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	if st == nil {
		t.Fatalf("open %s: status %d", path, resp.Status)
	}
	return st
}

// TestSetSpreadsOverSize opens streams concurrently: they spread over
// Size connections and no more are dialed, however many open at once.
func TestSetSpreadsOverSize(t *testing.T) {
	_, addr := startNode(t)
	var dials atomic.Int32
	s := newSet(t, addr, 3, &dials)
	var wg sync.WaitGroup
	streams := make(chan *Stream, 30)
	for range 30 {
		wg.Go(func() { streams <- setOpen(t, s, "/echo") })
	}
	wg.Wait()
	close(streams)
	if st := s.Stats(); st.Conns != 3 || st.Streams != 30 {
		t.Errorf("stats %+v, want 3 connections carrying 30 streams", st)
	}
	if n := dials.Load(); n != 3 {
		t.Errorf("%d dials, want 3", n)
	}
	i := 0
	for st := range streams {
		if err := echo(st, i, 1000); err != nil {
			t.Fatal(err)
		}
		st.Close()
		i++
	}
}

// TestSetGrowsPastFull opens a connection beyond Size once every open
// one is at the node's SETTINGS_MAX_CONCURRENT_STREAMS.
func TestSetGrowsPastFull(t *testing.T) {
	_, addr := startNode(t, "-max-streams", "2")
	var dials atomic.Int32
	s := newSet(t, addr, 1, &dials)
	for range 5 {
		setOpen(t, s, "/echo")
	}
	if st := s.Stats(); st.Conns != 3 || st.Streams != 5 {
		t.Errorf("stats %+v, want 3 connections (2+2+1 streams)", st)
	}
}

// TestSetAfterNodeRestart: a node that goes away (GOAWAY) and one that
// dies leave the set; the next Open dials a new connection.
func TestSetAfterNodeRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			p, addr := startNode(t)
			var dials atomic.Int32
			s := newSet(t, addr, 1, &dials)
			st := setOpen(t, s, "/echo")
			st.Close()
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			p.Wait(10 * time.Second)
			for range 1000 {
				if s.Stats().Conns == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if st := s.Stats(); st.Conns != 0 {
				t.Fatalf("the node's connection is still in the set: %+v", st)
			}
			// Same address, a new process.
			startNodeAt(t, addr)
			st = setOpen(t, s, "/echo")
			if err := echo(st, 1, 1000); err != nil {
				t.Fatal(err)
			}
			if n := dials.Load(); n != 2 {
				t.Errorf("%d dials, want 2", n)
			}
		})
	}
}

// TestSetDialError returns the dial's error, and a later Open dials
// again.
func TestSetDialError(t *testing.T) {
	var dials atomic.Int32
	s := newSet(t, "127.0.0.1:1", 2, &dials)
	for range 2 {
		_, _, err := s.Open(context.Background(), &Request{Authority: "n", Path: "/"})
		var op *net.OpError
		if !errors.As(err, &op) {
			t.Fatalf("open: %v, want the dial's error", err)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestSetClosed refuses new streams once closed, and its connections
// close once their streams have ended.
func TestSetClosed(t *testing.T) {
	_, addr := startNode(t)
	var dials atomic.Int32
	s := newSet(t, addr, 1, &dials)
	st := setOpen(t, s, "/echo")
	c := st.c
	s.Close()
	if _, _, err := s.Open(context.Background(), &Request{Authority: "n", Path: "/echo"}); !errors.Is(err, ErrSetClosed) {
		t.Fatalf("open after Close: %v", err)
	}
	if err := echo(st, 1, 1000); err != nil {
		t.Fatalf("an open stream ended with the set: %v", err)
	}
	st.Close()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection outlived its last stream")
	}
}

// TestSetPingEndsSilentConn: a node that stops answering (here: never
// acknowledges a PING) loses its connection within two intervals, and
// its streams end with ErrConnLost.
func TestSetPingEndsSilentConn(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// The node reads and answers nothing: a silent peer.
		for {
			if _, err := n.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	s := &Set{Size: 1, PingInterval: 50 * time.Millisecond}
	s.conns = []*Conn{c}
	go s.keepAlive(c)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a connection that answers no PING is still up")
	}
	if err := c.Err(); !errors.Is(err, ErrConnLost) {
		t.Errorf("err %v", err)
	}
}

// TestSetTrimsSurplus: connections opened beyond Size in a burst (every
// one full) close once idle, at the next ping tick; Size stay.
func TestSetTrimsSurplus(t *testing.T) {
	_, addr := startNode(t, "-max-streams", "2")
	var dials atomic.Int32
	s := newSet(t, addr, 1, &dials)
	s.PingInterval = 50 * time.Millisecond
	var streams []*Stream
	for range 5 {
		streams = append(streams, setOpen(t, s, "/echo"))
	}
	if st := s.Stats(); st.Conns != 3 {
		t.Fatalf("set %+v, want 3 connections", st)
	}
	for _, st := range streams {
		st.Close()
	}
	var st SetStats
	for range 500 {
		if st = s.Stats(); st.Conns == 1 && st.Closing == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("set %+v, want the 2 surplus connections closed", st)
}
