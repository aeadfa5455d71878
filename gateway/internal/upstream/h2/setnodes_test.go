package h2

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// waitFor polls cond every 10 ms until it holds, failing the test after
// 20 s (a bound on a hang, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// TestSetRetiresSpentConn pins that a connection that used up its stream
// identifiers (RFC 9113 section 5.1.1) leaves the set: it takes no new
// stream, a replacement is dialed, and it closes once its streams have
// ended. Before, it stayed in the set for good, pinged and carrying
// nothing, beside the connection dialed in its place.
func TestSetRetiresSpentConn(t *testing.T) {
	_, addr := startNode(t)
	var dials atomic.Int32
	s := newSet(t, addr, 1, &dials)
	first := setOpen(t, s, "/echo")
	old := first.c
	// The hook: the connection is close to the end of its identifiers.
	old.mu.Lock()
	old.nextID = retireIDAt
	old.mu.Unlock()
	last := setOpen(t, s, "/echo")
	if last.c != old || last.ID() != retireIDAt {
		t.Fatalf("stream %d on a new connection, want %d on the first", last.ID(), retireIDAt)
	}
	if err := echo(last, 1, 1000); err != nil {
		t.Fatal(err)
	}
	next := setOpen(t, s, "/echo")
	if next.c == old || next.ID() != 1 {
		t.Fatalf("stream %d on the spent connection, want 1 on a replacement", next.ID())
	}
	if st := s.Stats(); st.Conns != 1 || st.Closing != 1 || dials.Load() != 2 {
		t.Fatalf("stats %+v after %d dials, want 1 connection open and the spent one closing, 2 dials", st, dials.Load())
	}
	select {
	case <-old.GoingAway():
	default:
		t.Fatal("the spent connection still takes streams")
	}
	// Its streams go on until they end; then it closes.
	if err := echo(first, 2, 1000); err != nil {
		t.Fatal(err)
	}
	first.Close()
	last.Close()
	waitFor(t, "the spent connection to close", func() bool { return s.Stats().Closing == 0 })
	<-old.Done()
	if err := echo(next, 3, 1000); err != nil {
		t.Fatal(err)
	}
	next.Close()
	waitFor(t, "no stream left", func() bool { return s.Stats().Streams == 0 })
}

// TestOpenBoundedBehindStalledWrite pins that opening a stream waits no
// longer than its context (connect_timeout, in the gateway) behind a
// write to a node that stopped reading: the request's HEADERS are queued
// behind the stalled write, and the open gives up at its deadline. Before,
// it waited for the write lock, up to Config.WriteTimeout (an hour here).
func TestOpenBoundedBehindStalledWrite(t *testing.T) {
	const big = 8 << 20
	c, n, err := newFakeNode(t, Config{WriteTimeout: time.Hour}, xconnect,
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: big},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1<<24 - 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.fr.WriteWindowUpdate(0, big); err != nil {
		t.Fatal(err)
	}
	st, _ := n.openOK(c)
	// The node reads no more: one DATA frame of 8 MiB fills the sockets'
	// buffers and its write waits, holding the connection's writer.
	go st.Write(make([]byte, big))
	waitFor(t, "the write to stall", c.q.Writing)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, _, err := c.OpenWebSocket(ctx, &Request{Authority: "n", Path: "/"})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("open: %v, want its deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the open waited behind the stalled write past its deadline")
	}
}
