package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// ranked returns nodes in the order of their weighted rendezvous scores
// for key, best first, computed apart from the picker.
func ranked(nodes []*Node, key string) []*Node {
	kh := hashKey([]byte(key))
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b *Node) int {
		sa := rendezvous(kh, a.keySeed, uint64(a.fullWeight()))
		sb := rendezvous(kh, b.keySeed, uint64(b.fullWeight()))
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return out
}

// roomKey is the i-th of many distinct keys.
func roomKey(i int) []byte { return []byte(fmt.Sprintf("key-%d", i)) }

// boundFor is the bounded-load limit of node n among nodes after a pick:
// ceil((1+factor) × total live × w / W), every node a candidate, computed
// in the picker's float64 operations and order so the two agree at the
// edge.
func boundFor(nodes []*Node, n *Node, factor float64) int {
	var live int
	var weight float64
	for _, m := range nodes {
		live += m.Live()
		weight += float64(m.fullWeight())
	}
	return int(math.Ceil((1 + factor) * float64(live) * float64(n.fullWeight()) / weight))
}

// TestHashSameKeySameNode checks that while loads allow, every pick of a
// key lands on the key's top-ranked node, and that keys spread.
func TestHashSameKeySameNode(t *testing.T) {
	nodes := newNodes(5, 0)
	p := NewPool("relay", NewHash(0.25), nodes)
	seen := map[*Node]bool{}
	for k := range 50 {
		key := fmt.Sprintf("room-%d", k)
		want := ranked(nodes, key)[0]
		for i := range 5 {
			l, err := p.AcquireKey(nil, []byte(key))
			if err != nil {
				t.Fatal(err)
			}
			if l.Node() != want {
				t.Fatalf("key %s pick %d on %s, want %s", key, i, l.Node().Addr(), want.Addr())
			}
			seen[l.Node()] = true
			l.Release()
		}
	}
	if len(seen) != len(nodes) {
		t.Fatalf("50 keys used %d of %d nodes", len(seen), len(nodes))
	}
	assertAllZero(t, nodes)
}

// TestHashBoundedLoad drives hot keys (most picks on a few rooms) with
// random releases and checks that no pick ever puts its node past its
// bound, that while no lease is released no node is past its bound at all,
// and that a key whose node is full moves to its next-ranked node.
func TestHashBoundedLoad(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		factor  float64
		release bool
	}{
		{"equal 0.25", []int{1, 1, 1, 1}, 0.25, false},
		{"equal 0.1", []int{1, 1, 1, 1, 1, 1}, 0.1, false},
		{"weighted 0.25", []int{1, 2, 4}, 0.25, false},
		{"weighted 1.0", []int{3, 1, 1}, 1.0, false},
		{"equal 0.25 churn", []int{1, 1, 1, 1}, 0.25, true},
		{"weighted 0.5 churn", []int{1, 2, 4, 1}, 0.5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			nodes := weightedNodes(tt.weights...)
			p := NewPool("relay", NewHash(tt.factor), nodes)
			var held []*Lease
			for i := range 3000 {
				key := fmt.Sprintf("hot-%d", rng.IntN(3))
				if rng.IntN(4) == 0 {
					key = fmt.Sprintf("cold-%d", rng.IntN(1000))
				}
				l, err := p.AcquireKey(nil, []byte(key))
				if err != nil {
					t.Fatal(err)
				}
				n := l.Node()
				if b := boundFor(nodes, n, tt.factor); n.Live() > b {
					t.Fatalf("pick %d: node %s live %d past its bound %d", i, n.Addr(), n.Live(), b)
				}
				// The pick is the best-ranked node that was within its
				// bound: every node ranked above it was full.
				for _, m := range ranked(nodes, key) {
					if m == n {
						break
					}
					if m.Live()+1 <= boundFor(nodes, m, tt.factor) {
						t.Fatalf("pick %d of %s went to %s while %s, ranked higher, had room", i, key, n.Addr(), m.Addr())
					}
				}
				held = append(held, l)
				if tt.release && rng.IntN(3) == 0 {
					j := rng.IntN(len(held))
					held[j].Release()
					held = slices.Delete(held, j, j+1)
				}
				if !tt.release {
					for _, m := range nodes {
						if b := boundFor(nodes, m, tt.factor); m.Live() > b {
							t.Fatalf("after pick %d: node %s live %d past its bound %d", i, m.Addr(), m.Live(), b)
						}
					}
				}
			}
			releaseAll(held)
			assertAllZero(t, nodes)
		})
	}
}

// TestHashNodeLeaves checks rendezvous hashing's minimal disruption: taking
// one node out moves only the keys that node held.
func TestHashNodeLeaves(t *testing.T) {
	nodes := newNodes(5, 0)
	h := NewHash(0.25)
	before := map[string]*Node{}
	for k := range 2000 {
		key := fmt.Sprintf("room-%d", k)
		before[key] = h.PickKey(nodes, []byte(key))
	}
	gone := nodes[2]
	nodes[2].SetState(StateDown)
	p := NewPool("relay", h, nodes)
	for key, was := range before {
		l, err := p.AcquireKey(nil, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if was != gone && l.Node() != was {
			t.Fatalf("key %s moved from %s to %s though %s left", key, was.Addr(), l.Node().Addr(), gone.Addr())
		}
		if l.Node() == gone {
			t.Fatalf("key %s on the down node", key)
		}
		l.Release()
	}
}

// TestHashWithoutKey checks that a pick without a key (none, or empty)
// picks as least connections does.
func TestHashWithoutKey(t *testing.T) {
	nodes := newNodes(3, 0)
	held := append(hold(t, nodes[0], 3), hold(t, nodes[2], 2)...)
	p := NewPool("relay", NewHash(0.25), nodes)
	for _, key := range [][]byte{nil, {}} {
		for range 10 {
			l, err := p.AcquireKey(nil, key)
			if err != nil {
				t.Fatal(err)
			}
			if l.Node() != nodes[1] {
				t.Fatalf("key %q: picked %s, want the least loaded %s", key, l.Node().Addr(), nodes[1].Addr())
			}
			l.Release()
		}
		if n := NewHash(0.25).PickKey(nodes, key); n != nodes[1] {
			t.Fatalf("PickKey(%q) = %s, want %s", key, n.Addr(), nodes[1].Addr())
		}
	}
	if n := NewHash(0.25).Pick(nodes); n != nodes[1] {
		t.Fatalf("Pick = %s, want %s", n.Addr(), nodes[1].Addr())
	}
	releaseAll(held)
}

// TestHashSkipsIneligible checks a keyed pick never lands on a node that is
// down, draining, excluded or full, whatever the key's ranking.
func TestHashSkipsIneligible(t *testing.T) {
	nodes, exclude, cleanup := ineligibleSetup(t)
	p := NewPool("relay", NewHash(0.25), nodes)
	for k := range 200 {
		l, err := p.AcquireKey(exclude, []byte(fmt.Sprintf("room-%d", k)))
		if err != nil {
			t.Fatal(err)
		}
		if l.Node() != nodes[4] {
			t.Fatalf("acquired %s, want only %s", l.Node().Addr(), nodes[4].Addr())
		}
		l.Release()
	}
	cleanup()
	assertAllZero(t, nodes)
}

// TestHashSlowStart checks that a node at the start of its ramp wins about
// its floor share of keys.
func TestHashSlowStart(t *testing.T) {
	now := time.Now()
	setClock(t, now)
	nodes := newNodes(4, 0)
	nodes[0].SetSlowStart(now, time.Minute)
	p := NewPool("relay", NewHash(0.25), nodes)
	counts, _ := spread(t, p, 8000, roomKey, false)
	checkShares(t, counts, []int{1, 10, 10, 10}, 0.25)
}

func TestNewHashFactor(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{
		{0.5, 0.5}, {2, 2}, {0, DefaultHashBalanceFactor}, {-1, DefaultHashBalanceFactor},
		{math.NaN(), DefaultHashBalanceFactor}, {math.Inf(1), DefaultHashBalanceFactor},
	} {
		if got := NewHash(tt.in).Factor(); got != tt.want {
			t.Errorf("NewHash(%v).Factor() = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestHashKeyFixed pins the key hash, so gateways of different versions
// and processes agree on where a key goes.
func TestHashKeyFixed(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
	}{
		{"", mix64(14695981039346656037)},
		{"a", mix64(0xaf63dc4c8601ec8c)}, // FNV-1a 64 of "a"
	} {
		if got := hashKey([]byte(tt.in)); got != tt.want {
			t.Errorf("hashKey(%q) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

// FuzzHashPick checks, for any key and any live counts, that a keyed pick
// returns a candidate, the same one twice, and one within its bound.
func FuzzHashPick(f *testing.F) {
	f.Add([]byte("room-1"), uint8(0), uint8(0), uint8(0), uint8(1))
	f.Add([]byte(""), uint8(5), uint8(1), uint8(0), uint8(2))
	f.Add([]byte(""), uint8(0), uint8(0), uint8(0), uint8(15))
	f.Add([]byte("\x00\xff"), uint8(200), uint8(0), uint8(3), uint8(255))
	f.Fuzz(func(t *testing.T, key []byte, a, b, c, w uint8) {
		nodes := weightedNodes(1, int(w%8)+1, 2)
		var held []*Lease
		for i, k := range []uint8{a, b, c} {
			held = append(held, hold(t, nodes[i], int(k))...)
		}
		defer func() { releaseAll(held) }()
		h := NewHash(0.25)
		n := h.PickKey(nodes, key)
		if !slices.Contains(nodes, n) {
			t.Fatalf("picked %v, not a candidate", n)
		}
		if len(key) == 0 {
			return // least connections: ties are broken at random
		}
		if again := h.PickKey(nodes, key); again != n {
			t.Fatalf("picked %s then %s for the same state", n.Addr(), again.Addr())
		}
		l, ok := n.TryAcquire()
		if !ok {
			t.Fatal("uncapped node refused a lease")
		}
		held = append(held, l)
		if bnd := boundFor(nodes, n, 0.25); n.Live() > bnd {
			t.Fatalf("node %s live %d past its bound %d", n.Addr(), n.Live(), bnd)
		}
	})
}

// TestAcquireAllocsNewPolicies pins p2c and keyed hash acquires at one
// allocation (the lease), as least_conn's: the weights and ranking stay on
// the stack.
func TestAcquireAllocsNewPolicies(t *testing.T) {
	for _, tt := range []struct {
		name   string
		picker Picker
		key    []byte
	}{
		{"p2c", &P2C{}, nil},
		{"hash", NewHash(0.25), []byte("room-42")},
		{"hash without key", NewHash(0.25), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nodes := newNodes(16, 0)
			nodes[3].SetSlowStart(time.Now(), time.Hour)
			p := NewPool("relay", tt.picker, nodes)
			allocs := testing.AllocsPerRun(200, func() {
				l, err := p.AcquireKey(nil, tt.key)
				if err != nil {
					t.Fatal(err)
				}
				l.Release()
			})
			if allocs > 1 {
				t.Fatalf("AcquireKey+Release allocates %.1f times, want at most 1", allocs)
			}
		})
	}
}

// TestHashBoundTightWhenFew pins the example in docs/config.md: over three
// equal nodes at 0.25, a room's second lease is past ceil(1.25 × 2 / 3) = 1
// on the room's node and goes to its next; at factor 2 it stays.
func TestHashBoundTightWhenFew(t *testing.T) {
	for _, tt := range []struct {
		factor   float64
		together bool
	}{{0.25, false}, {2, true}} {
		nodes := newNodes(3, 0)
		p := NewPool("relay", NewHash(tt.factor), nodes)
		order := ranked(nodes, "room-1")
		a, err := p.AcquireKey(nil, []byte("room-1"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.AcquireKey(nil, []byte("room-1"))
		if err != nil {
			t.Fatal(err)
		}
		want := order[1]
		if tt.together {
			want = order[0]
		}
		if a.Node() != order[0] || b.Node() != want {
			t.Errorf("factor %v: leases on %s and %s, want %s and %s", tt.factor, a.Node().Addr(), b.Node().Addr(), order[0].Addr(), want.Addr())
		}
		a.Release()
		b.Release()
	}
}
