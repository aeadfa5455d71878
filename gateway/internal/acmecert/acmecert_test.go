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
