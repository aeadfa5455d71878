package revoke

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/internal/redistest"
)

// closer is a Closer that records what it was asked to close and answers
// tunnels for every call that names something.
type closer struct {
	mu      sync.Mutex
	calls   [][2]string
	tunnels int
}

func (c *closer) Revoke(subject, key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, [2]string{subject, key})
	if subject == "" && key == "" {
		return 0
	}
	return c.tunnels
}

// asked reports whether c was asked to close subject and key.
func (c *closer) asked(subject, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, call := range c.calls {
		if call == [2]string{subject, key} {
			return true
		}
	}
	return false
}

// counter is a Counter that sums what it is given.
type counter struct {
	mu  sync.Mutex
	sum float64
}

func (c *counter) Add(v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sum += v
}

func (c *counter) value() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sum
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRevokedSetBounded fills the revoked subjects past their bound: the
// one expiring soonest makes room, expired ones are forgotten.
func TestRevokedSetBounded(t *testing.T) {
	var r revokedSet
	now := time.Now()
	r.add("s:soonest", now.Add(time.Minute))
	for i := range maxRevoked - 1 {
		r.add(fmt.Sprintf("s:%d", i), now.Add(time.Hour))
	}
	r.add("k:one-more", now.Add(time.Hour))
	if r.has("s:soonest") || !r.has("k:one-more") || !r.has("s:0") || len(r.until) != maxRevoked {
		t.Fatalf("after overflow: soonest %v, one-more %v, size %d", r.has("s:soonest"), r.has("k:one-more"), len(r.until))
	}
	r.add("s:past", now.Add(-time.Second))
	if r.has("s:past") {
		t.Fatal("an expired revocation still refuses")
	}
	if r.has("s:") || r.has("k:") {
		t.Fatal("an empty name matched")
	}
}

// TestRevokedSetAdd checks what add reports: new for a name not refused
// (or refused no more), not new for one in force, whose expiry only
// grows.
func TestRevokedSetAdd(t *testing.T) {
	var r revokedSet
	now := time.Now()
	if !r.add("s:a", now.Add(time.Hour)) {
		t.Fatal("a first revocation is not new")
	}
	if r.add("s:a", now.Add(time.Minute)) {
		t.Fatal("a revocation in force again is new")
	}
	if u := r.until["s:a"]; !u.Equal(now.Add(time.Hour)) {
		t.Fatalf("a shorter revocation shortened the one in force: until %v", u)
	}
	r.add("s:a", now.Add(2*time.Hour))
	if u := r.until["s:a"]; !u.Equal(now.Add(2 * time.Hour)) {
		t.Fatalf("a longer revocation did not lengthen the one in force: until %v", u)
	}
	r.add("k:b", now.Add(-time.Second))
	if !r.add("k:b", now.Add(time.Hour)) || !r.has("k:b") {
		t.Fatal("a revocation after an expired one is not new, or does not refuse")
	}
}

// TestRevocationTTL reads a revocation's ttl: none is DefaultTTL, a
// positive duration is itself, anything else is an error.
func TestRevocationTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl  string
		want time.Duration
		ok   bool
	}{
		{"", DefaultTTL, true},
		{"1h", time.Hour, true},
		{"90s", 90 * time.Second, true},
		{"0s", 0, false},
		{"-1m", 0, false},
		{"soon", 0, false},
		{"3600", 0, false},
	} {
		t.Run(tc.ttl, func(t *testing.T) {
			d, err := Revocation{Subject: "a", TTL: tc.ttl}.ttl()
			if (err == nil) != tc.ok || d != tc.want {
				t.Fatalf("ttl %q = %v, %v; want %v, ok %v", tc.ttl, d, err, tc.want, tc.ok)
			}
		})
	}
}

// TestRevokeAlone revokes without a revocation Redis: the tunnels close
// here, are counted, and the subject or key is refused; a revocation that
// names nothing, or a bad ttl, is an error that closes nothing.
func TestRevokeAlone(t *testing.T) {
	c, n := &closer{tunnels: 3}, &counter{}
	v := New(quiet(), c, n)
	for _, bad := range []Revocation{{}, {TTL: "1h"}, {Subject: "a", TTL: "soon"}, {Key: "k", TTL: "-1s"}} {
		if _, _, err := v.Revoke(bad); err == nil {
			t.Errorf("Revoke(%+v): no error", bad)
		}
	}
	if len(c.calls) != 0 || n.value() != 0 {
		t.Fatalf("refused revocations closed %v, counted %v", c.calls, n.value())
	}
	published, closed, err := v.Revoke(Revocation{Subject: "alice"})
	if err != nil || published || closed != 3 || !c.asked("alice", "") || n.value() != 3 {
		t.Fatalf("Revoke(alice) = %v, %v, %v; calls %v, counted %v; want not published, 3 closed and counted", published, closed, err, c.calls, n.value())
	}
	if _, _, err := v.Revoke(Revocation{Key: "k1", TTL: "1h"}); err != nil || !c.asked("", "k1") {
		t.Fatalf("Revoke(k1): %v, calls %v", err, c.calls)
	}
	for _, tc := range []struct {
		subject, key string
		want         bool
	}{
		{"alice", "", true},
		{"alice", "k2", true},
		{"bob", "k1", true},
		{"", "k1", true},
		{"bob", "k2", false},
		{"", "", false},
		{"k1", "alice", false}, // a subject is not a key, nor the other way round
	} {
		if got := v.Revoked(tc.subject, tc.key); got != tc.want {
			t.Errorf("Revoked(%q, %q) = %v, want %v", tc.subject, tc.key, got, tc.want)
		}
	}
	v.Stop() // started nothing: nothing to stop
}

// TestRevokeSharedOverRedis shares revocations between Revokers on one
// redis-server: a revocation made on one closes the tunnels of another
// through the channel, and a Revoker started later loads it from the
// stored set, closing its tunnels before Start returns.
func TestRevokeSharedOverRedis(t *testing.T) {
	rs := redistest.Start(t)
	start := func(c *closer, n *counter) *Revoker {
		v := New(quiet(), c, n)
		if err := v.Start(rs.URL()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(v.Stop)
		return v
	}
	ca, cb := &closer{tunnels: 1}, &closer{tunnels: 2}
	nb := &counter{}
	a, b := start(ca, &counter{}), start(cb, nb)
	published, closed, err := a.Revoke(Revocation{Subject: "dave", TTL: "1h"})
	if err != nil || !published || closed != 0 {
		t.Fatalf("Revoke(dave) = %v, %v, %v; want published, 0 closed here yet", published, closed, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cb.asked("dave", "") || !ca.asked("dave", "") {
		if time.Now().After(deadline) {
			t.Fatalf("the published revocation did not reach both: a %v, b %v", ca.calls, cb.calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !b.Revoked("dave", "") || nb.value() != 2 {
		t.Fatalf("on the other replica: revoked %v, counted %v; want true, 2", b.Revoked("dave", ""), nb.value())
	}
	cc, nc := &closer{tunnels: 4}, &counter{}
	c := start(cc, nc)
	if !c.Revoked("dave", "") || !cc.asked("dave", "") || nc.value() != 4 {
		t.Fatalf("a replica started later: revoked %v, calls %v, counted %v; want the stored revocation loaded", c.Revoked("dave", ""), cc.calls, nc.value())
	}
}

// TestStartFailsWithoutRedis pins the start-up error of a revocation
// Redis that cannot be reached: the start fails, naming the URL without
// its password, and the Revoker keeps revoking alone.
func TestStartFailsWithoutRedis(t *testing.T) {
	c := &closer{tunnels: 1}
	v := New(quiet(), c, &counter{})
	err := v.Start("redis://default:hunter2@127.0.0.1:1/0")
	if err == nil {
		t.Fatal("started without its revocation Redis")
	}
	if msg := err.Error(); !strings.Contains(msg, "subscribe to revocations on redis://default:REDACTED@127.0.0.1:1/0") || strings.Contains(msg, "hunter2") {
		t.Fatalf("start error %q", msg)
	}
	if published, closed, err := v.Revoke(Revocation{Subject: "a"}); err != nil || published || closed != 1 {
		t.Fatalf("Revoke after a failed start = %v, %v, %v; want applied here", published, closed, err)
	}
	v.Stop()
}

// The registry and a Prometheus counter are what the gateway gives New.
var (
	_ Closer  = (*registry.Tunnels)(nil)
	_ Counter = prometheus.Counter(nil)
)
