package edge

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/penalty"
)

// TestListenerRefusesFloodBackoff runs a plain Listener with a back-off
// table in which 127.0.0.2 was cut for flooding: its connection is
// answered 429 with a Retry-After of the refusal left (whole seconds,
// rounded up), counted and written to the access log as flood_backoff,
// and takes no slot; a connection from 127.0.0.1 is admitted. Once the
// address is forgiven the table is empty and 127.0.0.2 is admitted.
func TestListenerRefusesFloodBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newCounts()
	limits := NewLimiter(100, 0, 0)
	bans := penalty.NewTable[netip.Addr](penalty.Policy{First: 1500 * time.Millisecond, Max: 1500 * time.Millisecond}, 16)
	l := NewListener(ln, limits, m, slog.New(slog.DiscardHandler), m, func() int { return 7 }).WithBackoff(bans)
	admitted := serveListener(t, l)
	addr := ln.Addr().String()

	bans.Cut(netip.MustParseAddr("127.0.0.2"), time.Now())
	c := dialFrom(t, addr, "127.0.0.2")
	resp := readResponse(t, c)
	if resp.StatusCode != http.StatusTooManyRequests || !resp.Close {
		t.Fatalf("a refused address: %d %v, want 429", resp.StatusCode, resp.Header)
	}
	// 1.5s at the cut, at most that at the refusal: 1 or 2 whole seconds.
	if ra := resp.Header.Get("Retry-After"); ra != "2" && ra != "1" {
		t.Fatalf("Retry-After %q, want the refusal left, rounded up", ra)
	}
	waitFor(t, func() bool { return m.refusedAt("flood_backoff") == 1 })
	m.mu.Lock()
	lines := m.lines
	m.mu.Unlock()
	if len(lines) != 1 || lines[0] != "429 flood_backoff" {
		t.Fatalf("access log lines %q", lines)
	}
	dialFrom(t, addr, "127.0.0.1")
	select {
	case <-admitted:
	case <-time.After(10 * time.Second):
		t.Fatal("127.0.0.1 was not admitted")
	}
	if n := limits.FromIP(netip.MustParseAddr("127.0.0.2")); n != 0 {
		t.Fatalf("the refused address holds %d slots", n)
	}
	waitFor(t, func() bool { return bans.Sweep(time.Now()) == 0 })
	dialFrom(t, addr, "127.0.0.2")
	select {
	case <-admitted:
	case <-time.After(10 * time.Second):
		t.Fatal("127.0.0.2 was not admitted once forgiven")
	}
}
