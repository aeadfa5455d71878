package edge

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

// TestLimiterSlots walks the limiter through admissions and releases: the
// global cap answers 503, the per-IP cap 429, a release frees its slot once
// however often it is called, the open-file ceiling holds max_conns down
// (also when a reload raises it), and every count is back to zero at the
// end.
func TestLimiterSlots(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	type step struct {
		ip      netip.Addr
		release int // >0: release the nth slot taken (1-based) instead of admitting
		want    int // 0 = admitted
	}
	cases := []struct {
		name                string
		max, perIP, ceiling int
		steps               []step
		wantOpen, wantFromA int64
		wantEffective       int64
	}{
		{name: "global cap", max: 2, ceiling: 0, steps: []step{
			{ip: a}, {ip: b}, {ip: a, want: 503}, {release: 1}, {ip: b}, {ip: b, want: 503},
		}, wantOpen: 2, wantFromA: 0, wantEffective: 2},
		{name: "per-ip cap", max: 100, perIP: 2, steps: []step{
			{ip: a}, {ip: a}, {ip: a, want: 429}, {ip: b}, {release: 2}, {ip: a}, {ip: a, want: 429},
		}, wantOpen: 3, wantFromA: 2, wantEffective: 100},
		{name: "global before per-ip", max: 1, perIP: 1, steps: []step{
			{ip: a}, {ip: a, want: 503}, {ip: b, want: 503},
		}, wantOpen: 1, wantFromA: 1, wantEffective: 1},
		{name: "double release frees once", max: 2, steps: []step{
			{ip: a}, {ip: a}, {release: 1}, {release: 1}, {ip: a}, {ip: a, want: 503},
		}, wantOpen: 2, wantFromA: 2, wantEffective: 2},
		{name: "open-file ceiling", max: 1_000_000, ceiling: 2, steps: []step{
			{ip: a}, {ip: b}, {ip: a, want: 503},
		}, wantOpen: 2, wantFromA: 1, wantEffective: 2},
		{name: "unlimited per ip", max: 10, perIP: 0, steps: []step{
			{ip: a}, {ip: a}, {ip: a}, {ip: a},
		}, wantOpen: 4, wantFromA: 4, wantEffective: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLimiter(tc.max, tc.perIP, tc.ceiling)
			var slots []*slot
			for i, st := range tc.steps {
				if st.release > 0 {
					slots[st.release-1].release()
					continue
				}
				s, status := l.admit(st.ip)
				if status != st.want || (s == nil) != (st.want != 0) {
					t.Fatalf("step %d (%v): status %d, slot %v; want %d", i, st.ip, status, s != nil, st.want)
				}
				if s != nil {
					slots = append(slots, s)
				}
			}
			if got := l.Open(); got != tc.wantOpen {
				t.Errorf("open %d, want %d", got, tc.wantOpen)
			}
			if got := l.FromIP(a); got != tc.wantFromA {
				t.Errorf("from %v: %d, want %d", a, got, tc.wantFromA)
			}
			if _, eff, _ := l.Limits(); eff != tc.wantEffective {
				t.Errorf("effective max_conns %d, want %d", eff, tc.wantEffective)
			}
			for _, s := range slots {
				s.release()
			}
			if l.Open() != 0 || l.FromIP(a) != 0 || l.FromIP(b) != 0 || len(l.byIP) != 0 {
				t.Fatalf("after releasing everything: open %d, by IP %v", l.Open(), l.byIP)
			}
		})
	}
	t.Run("reload keeps the ceiling", func(t *testing.T) {
		l := NewLimiter(5, 0, 10)
		l.Set(50, 3)
		if conf, eff, perIP := l.Limits(); conf != 50 || eff != 10 || perIP != 3 {
			t.Fatalf("after set(50, 3) under ceiling 10: configured %d, effective %d, per IP %d", conf, eff, perIP)
		}
		l.Set(4, 0)
		if _, eff, _ := l.Limits(); eff != 4 {
			t.Fatalf("after set(4, 0): effective %d", eff)
		}
	})
}

// TestLimiterConcurrent admits and releases from many goroutines at once:
// never more than the caps are open, and the counts end at zero.
func TestLimiterConcurrent(t *testing.T) {
	l := NewLimiter(40, 5, 0)
	var peak, peakIP atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(g % 4)})
			for range 500 {
				s, _ := l.admit(ip)
				if s == nil {
					continue
				}
				if n := l.Open(); n > peak.Load() {
					peak.Store(n)
				}
				if n := l.FromIP(ip); n > peakIP.Load() {
					peakIP.Store(n)
				}
				s.release()
				s.release()
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 40 || peakIP.Load() > 5 {
		t.Fatalf("peak open %d (max 40), peak from one IP %d (max 5)", peak.Load(), peakIP.Load())
	}
	if l.Open() != 0 || len(l.byIP) != 0 {
		t.Fatalf("open %d, by IP %v after every release", l.Open(), l.byIP)
	}
}

// TestLimiterStreamSlots pins that a connection's further streams
// (Stream) take gateway-wide slots as connections do, not only places of
// their address's: with max_conns = 3 and max_conns_per_ip = 2, a
// connection's second stream fits, its third is 429, another address's
// connection fills the gateway and a stream of it is then 503; every
// release gives back both counts, once.
func TestLimiterStreamSlots(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	l := NewLimiter(3, 2, 0)
	conn, _ := l.admit(a)
	give, status := l.Stream(a)
	if give == nil || status != 0 || l.Open() != 2 || l.FromIP(a) != 2 {
		t.Fatalf("second stream: %v %d; open %d, from a %d", give != nil, status, l.Open(), l.FromIP(a))
	}
	if g, status := l.Stream(a); g != nil || status != 429 {
		t.Fatalf("third stream of a, at max_conns_per_ip: %v %d, want 429", g != nil, status)
	}
	other, _ := l.admit(b)
	if g, status := l.Stream(b); g != nil || status != 503 {
		t.Fatalf("a stream at max_conns: %v %d, want 503", g != nil, status)
	}
	give()
	give()
	if l.Open() != 2 || l.FromIP(a) != 1 {
		t.Fatalf("after the stream's release (twice): open %d, from a %d", l.Open(), l.FromIP(a))
	}
	conn.release()
	other.release()
	if l.Open() != 0 || len(l.byIP) != 0 {
		t.Fatalf("open %d, by IP %v after every release", l.Open(), l.byIP)
	}
}
