package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestQuietClients pins that what go-redis logs on its own goes to the
// kept log, not to the test binary's output: a client of a server a test
// had stopped printed "redis: ... connection refused" lines among a
// passing test's output, 14 of them in one run of the gateway's tests.
func TestQuietClients(t *testing.T) {
	QuietClients(t)
	m := clients.mark()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatalf("PING to %s answered", addr)
	}
	lines := clients.since(m)
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "connection refused") }) {
		t.Fatalf("go-redis's dial failure is not in the kept log: %q", lines)
	}
}

// TestClientLogSince: since returns the lines after a mark that are
// still kept, the oldest gone once more than maxClientLines came.
func TestClientLogSince(t *testing.T) {
	var l clientLog
	for i := range 10 {
		l.Printf(context.Background(), "line %d\n", i)
	}
	if got := l.since(7); !slices.Equal(got, []string{"line 7", "line 8", "line 9"}) {
		t.Fatalf("since 7: %q", got)
	}
	if got := l.since(10); len(got) != 0 {
		t.Fatalf("since 10: %q", got)
	}
	for i := 10; i < maxClientLines+50; i++ {
		l.Printf(context.Background(), "line %d", i)
	}
	got := l.since(0)
	if len(got) != maxClientLines || got[0] != "line 50" || got[len(got)-1] != fmt.Sprintf("line %d", maxClientLines+49) {
		t.Fatalf("since 0 after %d lines: %d kept, first %q, last %q", maxClientLines+50, len(got), got[0], got[len(got)-1])
	}
}
