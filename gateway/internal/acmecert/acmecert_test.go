package acmecert

import (
	"crypto/tls"
	"testing"
	"time"
)

// TestBucket pins the on-demand rate: a burst at once, then rate a
// second, and never more than the burst saved up.
func TestBucket(t *testing.T) {
	b := newBucket(2, 3)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if !b.take(t0) {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	if b.take(t0) {
		t.Fatal("a take over the burst was allowed")
	}
	if !b.take(t0.Add(500*time.Millisecond)) || b.take(t0.Add(500*time.Millisecond)) {
		t.Fatal("half a second at 2/s should give exactly one token")
	}
	later := t0.Add(time.Hour)
	n := 0
	for b.take(later) {
		n++
	}
	if n != 3 {
		t.Fatalf("after an hour idle %d tokens, want the burst (3)", n)
	}
}

// TestIsChallenge pins what a tls-alpn-01 validation looks like: ALPN
// "acme-tls/1" alone; a client offering it among others is an ordinary
// client.
func TestIsChallenge(t *testing.T) {
	for _, tc := range []struct {
		protos []string
		want   bool
	}{
		{[]string{"acme-tls/1"}, true},
		{[]string{"acme-tls/1", "http/1.1"}, false},
		{[]string{"http/1.1"}, false},
		{nil, false},
	} {
		if got := IsChallenge(&tls.ClientHelloInfo{SupportedProtos: tc.protos}); got != tc.want {
			t.Errorf("IsChallenge(%q) = %v, want %v", tc.protos, got, tc.want)
		}
	}
}

// TestApprovals pins the memory of the ask URL's answers: an approval
// holds for approvedFor, a refusal for refusedFor, and the least recently
// answered name goes first once max are remembered, so strangers' names
// cannot grow it.
func TestApprovals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newApprovals(2)
	a.note("a.test", true, t0)
	a.note("b.test", false, t0)
	if ok, known := a.get("a.test", t0.Add(approvedFor-time.Second)); !ok || !known {
		t.Errorf("a.test within approvedFor: ok %v known %v, want approved", ok, known)
	}
	if ok, known := a.get("b.test", t0.Add(refusedFor-time.Second)); ok || !known {
		t.Errorf("b.test within refusedFor: ok %v known %v, want refused", ok, known)
	}
	if _, known := a.get("b.test", t0.Add(refusedFor)); known {
		t.Error("b.test's refusal outlived refusedFor")
	}
	if _, known := a.get("a.test", t0.Add(approvedFor)); known {
		t.Error("a.test's approval outlived approvedFor")
	}
	a.note("a.test", true, t0)
	a.note("b.test", true, t0)
	a.note("a.test", true, t0) // a.test answered last: b.test goes first
	a.note("c.test", true, t0)
	if _, known := a.get("b.test", t0); known {
		t.Error("b.test, the least recently answered, was kept over max")
	}
	for _, n := range []string{"a.test", "c.test"} {
		if ok, _ := a.get(n, t0); !ok {
			t.Errorf("%s forgotten", n)
		}
	}
	if len(a.byName) != 2 || a.order.Len() != 2 {
		t.Errorf("%d names, %d in order; want max (2)", len(a.byName), a.order.Len())
	}
}
