package balancer

import (
	"testing"
	"time"
)

// setClock makes pickers read now for the rest of the test and counts the
// reads. Tests in this package do not run in parallel, so swapping the
// package clock is safe.
func setClock(t *testing.T, now time.Time) *int {
	t.Helper()
	reads := new(int)
	old := clockNow
	clockNow = func() time.Time { *reads++; return now }
	t.Cleanup(func() { clockNow = old })
	return reads
}

func TestEffectiveWeightRamp(t *testing.T) {
	since := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const over = 10 * time.Second
	tests := []struct {
		name           string
		weight, agent  int
		over           time.Duration
		at             time.Duration // after since
		want           int
		wantPickWeight int // 0: same as want
	}{
		{"no slow start", 1, 0, 0, 0, 1000, 0},
		{"before the ramp: floor", 1, 0, over, -time.Second, 100, 0},
		{"at the start: floor", 1, 0, over, 0, 100, 0},
		{"5%: still the floor", 1, 0, over, 500 * time.Millisecond, 100, 0},
		{"20%", 1, 0, over, 2 * time.Second, 200, 0},
		{"half way", 1, 0, over, 5 * time.Second, 500, 0},
		{"just before the end", 1, 0, over, 9999 * time.Millisecond, 999, 0},
		{"at the end", 1, 0, over, over, 1000, 0},
		{"long after", 1, 0, over, time.Hour, 1000, 0},
		{"weight 3 half way", 3, 0, over, 5 * time.Second, 1500, 0},
		{"agent weight replaces weight", 3, 7, 0, 0, 7000, 0},
		{"agent weight half way", 1, 4, over, 5 * time.Second, 2000, 0},
		{"year-long ramp does not overflow", 1000, 0, 365 * 24 * time.Hour, 73 * 24 * time.Hour, 200_000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode("a", tt.weight, 0)
			n.SetAgentWeight(tt.agent)
			n.SetSlowStart(since, tt.over)
			now := since.Add(tt.at)
			if got := n.EffectiveWeight(now); got != tt.want {
				t.Errorf("EffectiveWeight(since%+v) = %d, want %d", tt.at, got, tt.want)
			}
			// The picker's view agrees with the exported one.
			setClock(t, now)
			var clk clock
			if got := n.pickWeight(&clk); got != uint64(tt.want) {
				t.Errorf("pickWeight = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSlowStartOff(t *testing.T) {
	now := time.Now()
	for _, over := range []time.Duration{0, -time.Second} {
		t.Run(over.String(), func(t *testing.T) {
			n := NewNode("a", 2, 0)
			n.SetSlowStart(now, time.Hour)
			if got := n.EffectiveWeight(now); got != 200 {
				t.Fatalf("ramp start weight %d, want 200", got)
			}
			n.SetSlowStart(now, over)
			if got := n.EffectiveWeight(now); got != 2000 {
				t.Fatalf("after SetSlowStart(_, %v) weight %d, want 2000", over, got)
			}
		})
	}
}

func TestSetAgentWeight(t *testing.T) {
	tests := []struct {
		name      string
		set, want int
	}{
		{"none", 0, 0},
		{"plain", 5, 5},
		{"top of range", 1000, 1000},
		{"above range clamps", 5000, 1000},
		{"negative means none", -3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode("a", 2, 0)
			n.SetAgentWeight(tt.set)
			if n.AgentWeight() != tt.want {
				t.Fatalf("AgentWeight() = %d, want %d", n.AgentWeight(), tt.want)
			}
			if n.Weight() != 2 {
				t.Fatalf("agent weight changed the configured weight to %d", n.Weight())
			}
			want := tt.want * WeightScale
			if tt.want == 0 {
				want = 2 * WeightScale
			}
			if got := n.EffectiveWeight(time.Now()); got != want {
				t.Fatalf("EffectiveWeight = %d, want %d", got, want)
			}
		})
	}
}

// TestLeastConnSharesWithEffectiveWeights holds leases from an empty start
// on two nodes of weight 1, the second in slow start (or with an agent
// weight), and checks the exact split least_conn gives.
func TestLeastConnSharesWithEffectiveWeights(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const over = 10 * time.Second
	tests := []struct {
		name   string
		at     time.Duration // since the second node's ramp began
		over   time.Duration
		agent  int // the second node's agent weight
		total  int
		wantA  int
		wantB  int
		wantRd int // clock reads over all acquires
	}{
		{"ramp 10%", over / 10, over, 0, 1100, 1000, 100, 1100},
		{"ramp 25%", over / 4, over, 0, 500, 400, 100, 500},
		{"ramp 50%", over / 2, over, 0, 300, 200, 100, 300},
		{"not started yet: floor", -time.Hour, over, 0, 1100, 1000, 100, 1100},
		{"ramp over", 2 * over, over, 0, 200, 100, 100, 1}, // the first pick clears the ramp
		{"no slow start", 0, 0, 0, 200, 100, 100, 0},
		{"agent weight 3", 0, 0, 3, 400, 100, 300, 0},
		{"agent weight 2 at half ramp", over / 2, over, 2, 200, 100, 100, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads := setClock(t, now)
			a, b := NewNode("a", 1, 0), NewNode("b", 1, 0)
			b.SetAgentWeight(tt.agent)
			b.SetSlowStart(now.Add(-tt.at), tt.over)
			p := NewPool("relay", &LeastConn{}, []*Node{a, b})
			var held []*Lease
			for range tt.total {
				l, err := p.Acquire(nil)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			if a.Live() != tt.wantA || b.Live() != tt.wantB {
				t.Errorf("split %d/%d, want %d/%d", a.Live(), b.Live(), tt.wantA, tt.wantB)
			}
			if *reads != tt.wantRd {
				t.Errorf("clock read %d times in %d acquires, want %d", *reads, tt.total, tt.wantRd)
			}
			releaseAll(held)
			assertAllZero(t, []*Node{a, b})
		})
	}
}

// TestAcquireReadsClockAtMostOnce checks the clock is read once per acquire
// however many candidates are in slow start, and never when none is.
func TestAcquireReadsClockAtMostOnce(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name      string
		ramping   int // of 8 nodes
		wantReads int // per acquire
	}{
		{"none ramping", 0, 0},
		{"one ramping", 1, 1},
		{"all ramping", 8, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads := setClock(t, now)
			nodes := newNodes(8, 0)
			for _, n := range nodes[:tt.ramping] {
				n.SetSlowStart(now, time.Minute)
			}
			p := NewPool("relay", nil, nodes)
			for i := range 20 {
				before := *reads
				l, err := p.Acquire(nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := *reads - before; got != tt.wantReads {
					t.Fatalf("acquire %d read the clock %d times, want %d", i, got, tt.wantReads)
				}
				l.Release()
			}
			assertAllZero(t, nodes)
		})
	}
}

// TestAcquireAllocsInSlowStart pins Acquire at one allocation (the lease)
// while nodes ramp.
func TestAcquireAllocsInSlowStart(t *testing.T) {
	nodes := newNodes(16, 0)
	for _, n := range nodes {
		n.SetSlowStart(time.Now(), time.Hour)
		n.SetAgentWeight(3)
	}
	p := NewPool("relay", nil, nodes)
	allocs := testing.AllocsPerRun(200, func() {
		l, err := p.Acquire(nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	})
	if allocs > 1 {
		t.Fatalf("Acquire+Release allocates %.1f times, want at most 1", allocs)
	}
}
