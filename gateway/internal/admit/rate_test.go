package admit

import (
	"net/netip"
	"testing"
	"time"
)

// TestBucket walks a token bucket on a made-up clock: it starts full,
// refills at rate up to burst, and never goes above burst.
func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b bucket
	for i := range 3 {
		if !b.take(t0, 2, 3) {
			t.Fatalf("take %d of a full bucket of 3 refused", i)
		}
	}
	if b.take(t0, 2, 3) {
		t.Fatal("fourth take at once admitted")
	}
	if b.take(t0.Add(400*time.Millisecond), 2, 3) {
		t.Fatal("0.8 token after 400ms at 2/s admitted")
	}
	if !b.take(t0.Add(500*time.Millisecond), 2, 3) {
		t.Fatal("a whole token after 500ms at 2/s refused")
	}
	// An hour later: full again, not 7200 tokens.
	later := t0.Add(time.Hour)
	n := 0
	for b.take(later, 2, 3) {
		n++
	}
	if n != 3 {
		t.Fatalf("%d takes after an hour, want burst 3", n)
	}
	if !b.full(later.Add(1500*time.Millisecond), 2, 3) || b.full(later.Add(time.Second), 2, 3) {
		t.Fatal("full: a bucket of 3 at 2/s is full 1.5s after empty, not 1s after")
	}
}

// TestIPRate checks that the per-IP buckets are per address, that rate 0
// lets everything through and forgets every address, and that a reload
// to a new rate applies.
func TestIPRate(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	r := NewIPRate(1, 2)
	if ok, _, _ := r.Allow(a); !ok {
		t.Fatal("first from a refused")
	}
	if ok, _, _ := r.Allow(a); !ok {
		t.Fatal("second from a refused (burst 2)")
	}
	if ok, rate, burst := r.Allow(a); ok || rate != 1 || burst != 2 {
		t.Fatalf("third from a: %v %d %d, want refused with 1, 2", ok, rate, burst)
	}
	if ok, _, _ := r.Allow(b); !ok {
		t.Fatal("b refused for a's requests")
	}
	if r.tracked() != 2 {
		t.Fatalf("tracked %d, want 2", r.tracked())
	}
	r.Set(0, 0)
	for range 100 {
		if ok, _, _ := r.Allow(a); !ok {
			t.Fatal("refused with rate 0")
		}
	}
	if r.tracked() != 0 {
		t.Fatalf("tracked %d with rate 0, want 0", r.tracked())
	}
}

// TestJitteredRetryAfter checks the bounds of the jittered Retry-After,
// [base, base + ceil(burst/rate)], and that it does spread.
func TestJitteredRetryAfter(t *testing.T) {
	for _, tc := range []struct{ base, rate, burst, hi int }{
		{1, 100, 100, 2}, {1, 100, 250, 4}, {3, 10, 5, 4}, {2, 1, 10, 12},
	} {
		seen := map[int]bool{}
		for range 2000 {
			v := JitteredRetryAfter(tc.base, tc.rate, tc.burst)
			if v < tc.base || v > tc.hi {
				t.Fatalf("%+v: %d outside [%d, %d]", tc, v, tc.base, tc.hi)
			}
			seen[v] = true
		}
		if len(seen) != tc.hi-tc.base+1 {
			t.Errorf("%+v: values %v, want every one of [%d, %d]", tc, seen, tc.base, tc.hi)
		}
	}
}

// TestPerIPLimitsKeyOnWholeAddress pins what "one client IP" is for
// handshake_rate_per_ip: the whole address, so two IPv6 addresses of one
// /64 count apart. Its max_conns_per_ip half is edge's test of the same
// name.
func TestPerIPLimitsKeyOnWholeAddress(t *testing.T) {
	a, b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	r := NewIPRate(1, 1)
	if ok, _, _ := r.Allow(a); !ok {
		t.Fatal("first request from 2001:db8::1 refused")
	}
	if ok, _, _ := r.Allow(b); !ok {
		t.Fatal("2001:db8::2 refused for 2001:db8::1's request")
	}
}
