package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// seededP2C returns a P2C drawing from a fixed-seed generator, for one
// goroutine.
func seededP2C(seed uint64) *P2C {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &P2C{rand: r.Uint64}
}

// weightedNodes returns up, uncapped nodes with the given weights.
func weightedNodes(weights ...int) []*Node {
	nodes := make([]*Node, len(weights))
	for i, w := range weights {
		nodes[i] = NewNode(fmt.Sprintf("127.0.0.1:%d", 7001+i), w, 0)
	}
	return nodes
}

// checkShares fails unless counts[i] is within tol (a fraction of the
// expected count) of total × weights[i] / sum(weights).
func checkShares(t *testing.T, counts []int, weights []int, tol float64) {
	t.Helper()
	var sumW, total int
	for i := range weights {
		sumW += weights[i]
		total += counts[i]
	}
	for i, w := range weights {
		want := float64(total) * float64(w) / float64(sumW)
		if math.Abs(float64(counts[i])-want) > tol*want {
			t.Errorf("node %d (weight %d): %d of %d, want %.0f ± %.0f%%", i, w, counts[i], total, want, tol*100)
		}
	}
}

// spread takes picks leases from p, the i-th with key(i) (no key if key is
// nil), and counts them per node in the order of p.Nodes(). It holds the
// leases and returns them if hold is set, else releases each at once.
func spread(t *testing.T, p *Pool, picks int, key func(i int) []byte, hold bool) (counts []int, held []*Lease) {
	t.Helper()
	nodes := p.Nodes()
	counts = make([]int, len(nodes))
	for i := range picks {
		var k []byte
		if key != nil {
			k = key(i)
		}
		l, err := p.AcquireKey(nil, k)
		if err != nil {
			t.Fatal(err)
		}
		counts[slices.Index(nodes, l.Node())]++
		if hold {
			held = append(held, l)
		} else {
			l.Release()
		}
	}
	return counts, held
}

// checkSpread takes picks leases with picker over nodes of the given
// weights (see spread) and fails unless each node's count is within tol
// of its weighted share; it then releases every lease.
func checkSpread(t *testing.T, picker Picker, weights []int, picks int, key func(int) []byte, hold bool, tol float64) {
	t.Helper()
	nodes := weightedNodes(weights...)
	counts, held := spread(t, NewPool("relay", picker, nodes), picks, key, hold)
	checkShares(t, counts, weights, tol)
	releaseAll(held)
	assertAllZero(t, nodes)
}

// TestWeightedShares checks that p2c and hash give each node its weighted
// share. p2c: while leases accumulate (the live/weight comparison steers)
// and when every lease is released at once (the weighted draws alone
// steer), from a fixed seed. hash, over many keys with one lease each:
// within 10% while the bound does not bite (released at once), and within
// the bound when held.
func TestWeightedShares(t *testing.T) {
	p2c := func(float64) Picker { return seededP2C(1) }
	hash := func(f float64) Picker { return NewHash(f) }
	tests := []struct {
		name    string
		picker  func(factor float64) Picker
		key     func(int) []byte
		weights []int
		hold    bool
		factor  float64
		tol     float64
	}{
		{"p2c equal held", p2c, nil, []int{1, 1, 1, 1}, true, 0, 0.02},
		{"p2c weighted held", p2c, nil, []int{1, 1, 2, 4}, true, 0, 0.05},
		{"p2c two nodes held", p2c, nil, []int{1, 3}, true, 0, 0.02},
		{"p2c weighted released", p2c, nil, []int{1, 1, 2, 4}, false, 0, 0.08},
		{"p2c many weighted released", p2c, nil, []int{1, 2, 3, 4, 5, 6, 7, 8}, false, 0, 0.12},
		{"hash equal released", hash, roomKey, []int{1, 1, 1, 1, 1}, false, 0.25, 0.10},
		{"hash weighted released", hash, roomKey, []int{1, 2, 3, 2}, false, 0.25, 0.10},
		{"hash equal held", hash, roomKey, []int{1, 1, 1, 1, 1}, true, 0.25, 0.25},
		{"hash weighted held tight", hash, roomKey, []int{1, 2, 3, 2}, true, 0.05, 0.05},
	}
	const picks = 10000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkSpread(t, tt.picker(tt.factor), tt.weights, picks, tt.key, tt.hold, tt.tol)
		})
	}
}

// TestP2CPrefersLessLoaded checks that of its two draws p2c keeps the one
// with the lower live/weight ratio: with two nodes both are always drawn,
// so the pick is exact.
func TestP2CPrefersLessLoaded(t *testing.T) {
	tests := []struct {
		name         string
		live, weight [2]int
		want         int
	}{
		{"fewer live", [2]int{5, 2}, [2]int{1, 1}, 1},
		{"weight outweighs", [2]int{4, 3}, [2]int{4, 1}, 0},
		{"first has fewer", [2]int{0, 1}, [2]int{1, 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := weightedNodes(tt.weight[0], tt.weight[1])
			held := append(hold(t, nodes[0], tt.live[0]), hold(t, nodes[1], tt.live[1])...)
			pk := seededP2C(7)
			for i := range 50 {
				if got := pk.Pick(nodes); got != nodes[tt.want] {
					t.Fatalf("pick %d = %s, want %s", i, got.Addr(), nodes[tt.want].Addr())
				}
			}
			releaseAll(held)
		})
	}
}

// TestP2CSlowStart checks that a node at the start of its ramp gets about
// its floor share (10% of its weight) of p2c's draws.
func TestP2CSlowStart(t *testing.T) {
	now := time.Now()
	setClock(t, now)
	nodes := newNodes(4, 0)
	nodes[0].SetSlowStart(now, time.Minute) // at SlowStartFloorPercent
	p := NewPool("relay", seededP2C(3), nodes)
	counts, _ := spread(t, p, 8000, nil, false)
	checkShares(t, counts, []int{1, 10, 10, 10}, 0.25)
}

func TestP2CPickEdges(t *testing.T) {
	pk := &P2C{}
	if n := pk.Pick(nil); n != nil {
		t.Fatalf("Pick(nil) = %v, want nil", n)
	}
	one := newNodes(1, 0)
	if n := pk.Pick(one); n != one[0] {
		t.Fatalf("Pick(one) = %v, want %v", n, one[0])
	}
	// Past stackCandidates the weights spill to the heap; the pick still
	// returns a candidate.
	many := newNodes(stackCandidates+5, 0)
	for range 100 {
		if n := pk.Pick(many); n == nil {
			t.Fatal("Pick(many) = nil")
		}
	}
}

func TestWeightedIndex(t *testing.T) {
	ws := []uint64{1, 2, 3}
	tests := []struct {
		total uint64
		skip  int
		r     uint64
		want  int
	}{
		{6, -1, 0, 0},
		{6, -1, 1, 1},
		{6, -1, 2, 1},
		{6, -1, 3, 2},
		{6, -1, 5, 2},
		{6, -1, 6, 0}, // r wraps modulo total
		{5, 0, 0, 1},
		{5, 0, 2, 2},
		{4, 1, 0, 0},
		{4, 1, 1, 2},
		{3, 2, 2, 1},
	}
	for _, tt := range tests {
		if got := weightedIndex(ws, tt.total, tt.skip, tt.r); got != tt.want {
			t.Errorf("weightedIndex(%v, %d, skip %d, r %d) = %d, want %d", ws, tt.total, tt.skip, tt.r, got, tt.want)
		}
	}
}
