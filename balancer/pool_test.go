package balancer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ineligibleSetup builds five nodes where only the last may take a lease:
// down, draining, excluded, at its cap, and an up node that is the most
// loaded, so a least-loaded policy would prefer any of the others.
func ineligibleSetup(t *testing.T) (nodes, exclude []*Node, cleanup func()) {
	t.Helper()
	nodes = newNodes(5, 0)
	nodes[0].SetState(StateDown)
	nodes[1].SetState(StateDraining)
	exclude = []*Node{nodes[2]}
	nodes[3].SetMaxConns(1)
	held := hold(t, nodes[3], 1)
	held = append(held, hold(t, nodes[4], 10)...)
	return nodes, exclude, func() { releaseAll(held) }
}

func TestAcquireSkipsIneligible(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			nodes, exclude, cleanup := ineligibleSetup(t)
			picker, err := NewPicker(policy)
			if err != nil {
				t.Fatal(err)
			}
			p := NewPool("relay", picker, nodes)
			var got []*Lease
			for range 20 {
				l, err := p.Acquire(exclude)
				if err != nil {
					t.Fatal(err)
				}
				if l.Node() != nodes[4] {
					t.Fatalf("acquired %s, want only %s", l.Node().Addr(), nodes[4].Addr())
				}
				got = append(got, l)
			}
			releaseAll(got)
			cleanup()
			assertAllZero(t, nodes)
		})
	}
}

func TestRoundRobinPoolSkipsIneligible(t *testing.T) {
	nodes := newNodes(3, 0)
	nodes[1].SetState(StateDown)
	p := NewPool("relay", &RoundRobin{}, nodes)
	want := []*Node{nodes[0], nodes[2], nodes[0], nodes[2]}
	for i, w := range want {
		l, err := p.Acquire(nil)
		if err != nil {
			t.Fatal(err)
		}
		if l.Node() != w {
			t.Fatalf("acquire %d got %s, want %s", i, l.Node().Addr(), w.Addr())
		}
		l.Release()
	}
	assertAllZero(t, nodes)
}

func TestAcquireNoCapacity(t *testing.T) {
	tests := []struct {
		name  string
		setup func(nodes []*Node) (exclude []*Node)
	}{
		{"empty pool", nil},
		{"all down", func(ns []*Node) []*Node {
			ns[0].SetState(StateDown)
			ns[1].SetState(StateDown)
			return nil
		}},
		{"down and draining", func(ns []*Node) []*Node {
			ns[0].SetState(StateDown)
			ns[1].SetState(StateDraining)
			return nil
		}},
		{"all excluded", func(ns []*Node) []*Node { return ns }},
		{"drained and ejected", func(ns []*Node) []*Node {
			ns[0].SetState(StateDrained)
			ns[1].SetState(StateEjected)
			return nil
		}},
		{"one draining one excluded", func(ns []*Node) []*Node {
			ns[0].SetState(StateDraining)
			return ns[1:]
		}},
		{"cap zero-ed by lowering", func(ns []*Node) []*Node {
			for _, n := range ns {
				n.SetMaxConns(1)
				n.live.Store(1) // as if a lease were held
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var nodes, exclude []*Node
			if tt.setup != nil {
				nodes = newNodes(2, 0)
				exclude = tt.setup(nodes)
			}
			p := NewPool("relay", nil, nodes)
			l, err := p.Acquire(exclude)
			if !errors.Is(err, ErrNoCapacity) || l != nil {
				t.Fatalf("Acquire = %v, %v; want ErrNoCapacity", l, err)
			}
		})
	}
}

func TestAcquireAllFull(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			nodes := newNodes(3, 4)
			picker, _ := NewPicker(policy)
			p := NewPool("relay", picker, nodes)
			var held []*Lease
			for range 12 {
				l, err := p.Acquire(nil)
				if err != nil {
					t.Fatalf("acquire %d of 12: %v", len(held)+1, err)
				}
				held = append(held, l)
			}
			if _, err := p.Acquire(nil); !errors.Is(err, ErrNoCapacity) {
				t.Fatalf("13th acquire err = %v, want ErrNoCapacity", err)
			}
			held[0].Release()
			l, err := p.Acquire(nil)
			if err != nil || l.Node() != held[0].Node() {
				t.Fatalf("acquire after one release = %v, %v; want a lease on the freed node", l, err)
			}
			releaseAll(append(held, l))
			assertAllZero(t, nodes)
		})
	}
}

// TestAcquireCapConcurrent fires concurrent Acquires at a pool of capped
// nodes: no node ever shows more than its cap, exactly the total capacity
// is granted while everything is held, the rest get ErrNoCapacity, and all
// counts return to zero after release.
func TestAcquireCapConcurrent(t *testing.T) {
	tests := []struct {
		name                        string
		policy                      string
		nodes, maxConns, goroutines int
		perG                        int
		key                         string // for AcquireKey; "" = none
	}{
		{"least_conn 2x10", "least_conn", 2, 10, 8, 20, ""},
		{"round_robin 2x10", "round_robin", 2, 10, 8, 20, ""},
		{"least_conn 16x3", "least_conn", 16, 3, 8, 25, ""},
		{"round_robin 16x1", "round_robin", 16, 1, 8, 25, ""},
		{"p2c 2x10", "p2c", 2, 10, 8, 20, ""},
		{"p2c 16x3", "p2c", 16, 3, 8, 25, ""},
		{"hash one key 2x10", "hash", 2, 10, 8, 20, "room-1"},
		{"hash one key 16x3", "hash", 16, 3, 8, 25, "room-1"},
		{"hash without key 16x1", "hash", 16, 1, 8, 25, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := newNodes(tt.nodes, tt.maxConns)
			picker, _ := NewPicker(tt.policy)
			p := NewPool("relay", picker, nodes)
			var (
				mu      sync.Mutex
				held    []*Lease
				refused atomic.Int64
				badErr  atomic.Value
				over    atomic.Bool
				wg      sync.WaitGroup
				start   = make(chan struct{})
			)
			for range tt.goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range tt.perG {
						l, err := p.AcquireKey(nil, []byte(tt.key))
						for _, n := range nodes {
							if n.Live() > tt.maxConns {
								over.Store(true)
							}
						}
						switch {
						case err == nil:
							mu.Lock()
							held = append(held, l)
							mu.Unlock()
						case errors.Is(err, ErrNoCapacity):
							refused.Add(1)
						default:
							badErr.Store(err)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if err := badErr.Load(); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if over.Load() {
				t.Fatal("a node's live count went above its cap")
			}
			capacity := tt.nodes * tt.maxConns
			if len(held) != capacity || int(refused.Load()) != tt.goroutines*tt.perG-capacity {
				t.Fatalf("granted %d, refused %d; want %d granted", len(held), refused.Load(), capacity)
			}
			for _, n := range nodes {
				if n.Live() != tt.maxConns {
					t.Errorf("node %s live %d, want %d", n.Addr(), n.Live(), tt.maxConns)
				}
			}
			releaseAll(held)
			assertAllZero(t, nodes)
		})
	}
}

// racingPicker fills the node it picks before returning it, the way a
// concurrent Acquire could between filtering and the compare-and-swap.
type racingPicker struct {
	stolen []*Lease
	offers []int
}

func (r *racingPicker) Pick(c []*Node) *Node {
	r.offers = append(r.offers, len(c))
	n := c[0]
	for {
		l, ok := n.TryAcquire()
		if !ok {
			return n
		}
		r.stolen = append(r.stolen, l)
	}
}

func TestAcquireRetriesWhenPickFills(t *testing.T) {
	tests := []struct {
		name       string
		nodes      int
		wantOffers []int
	}{
		{"every pick is stolen", 3, []int{3, 2, 1}},
		{"single node", 1, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := newNodes(tt.nodes, 2)
			rp := &racingPicker{}
			p := NewPool("relay", rp, nodes)
			if _, err := p.Acquire(nil); !errors.Is(err, ErrNoCapacity) {
				t.Fatalf("err = %v, want ErrNoCapacity once every pick was filled", err)
			}
			if len(rp.offers) != len(tt.wantOffers) {
				t.Fatalf("picker offered %v, want %v", rp.offers, tt.wantOffers)
			}
			for i := range rp.offers {
				if rp.offers[i] != tt.wantOffers[i] {
					t.Fatalf("picker offered %v, want %v", rp.offers, tt.wantOffers)
				}
			}
			releaseAll(rp.stolen)
			assertAllZero(t, nodes)
		})
	}
}

// firstPicker always returns the first candidate.
type firstPicker struct{}

func (firstPicker) Pick(c []*Node) *Node { return c[0] }

func TestAcquireRetriesOnNextNode(t *testing.T) {
	nodes := newNodes(2, 1)
	p := NewPool("relay", firstPicker{}, nodes)
	a, err := p.Acquire(nil)
	if err != nil || a.Node() != nodes[0] {
		t.Fatalf("first acquire = %v, %v", a, err)
	}
	b, err := p.Acquire(nil)
	if err != nil || b.Node() != nodes[1] {
		t.Fatalf("second acquire = %v, %v; want node 1", b, err)
	}
	a.Release()
	b.Release()
	assertAllZero(t, nodes)
}

func TestPoolSetNodes(t *testing.T) {
	old := newNodes(2, 0)
	p := NewPool("relay", nil, old)
	if p.Name() != "relay" || len(p.Nodes()) != 2 {
		t.Fatalf("pool %q with %d nodes", p.Name(), len(p.Nodes()))
	}
	old[0] = nil // the pool keeps its own copy
	if p.Nodes()[0] == nil {
		t.Fatal("pool shares the caller's slice")
	}
	l, err := p.Acquire(nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh := newNodes(1, 0)
	p.SetNodes(fresh)
	if len(p.Nodes()) != 1 || p.Nodes()[0] != fresh[0] {
		t.Fatal("SetNodes did not replace the set")
	}
	l2, err := p.Acquire(nil)
	if err != nil || l2.Node() != fresh[0] {
		t.Fatalf("acquire after swap = %v, %v", l2, err)
	}
	retired := l.Node()
	l.Release() // a lease on a node that left the pool still releases
	l2.Release()
	assertAllZero(t, []*Node{retired, fresh[0]})
	p.SetNodes(nil)
	if _, err := p.Acquire(nil); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("empty pool err = %v", err)
	}
}

// TestMixedWorkloadReturnsToZero runs workers that acquire leases, hold a
// few at a time and release each one twice from two goroutines at once,
// while another goroutine keeps flipping node states and swapping the node
// set until the workers finish. It proves no node goes above its cap or
// below zero, every granted lease is released, and all counts return to
// exactly zero.
func TestMixedWorkloadReturnsToZero(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			const (
				workers  = 6
				perW     = 300
				holdMax  = 3
				maxConns = 5
				maxFlips = 1_000_000 // bound for the flipper; it stops when the workers do
			)
			nodes := newNodes(4, maxConns)
			picker, _ := NewPicker(policy)
			p := NewPool("relay", picker, nodes)
			var (
				granted, released, refused atomic.Int64
				flipped                    atomic.Int64
				bad                        atomic.Value
				wg, flipWG                 sync.WaitGroup
				done                       = make(chan struct{})
			)
			check := func() {
				for _, n := range nodes {
					if v := n.Live(); v < 0 || v > maxConns {
						bad.Store(fmt.Errorf("node %s live %d outside [0, %d]", n.Addr(), v, maxConns))
					}
				}
			}
			flipWG.Add(1)
			go func() {
				defer flipWG.Done()
				states := []State{StateUp, StateDown, StateDraining, StateDrained, StateEjected, StateUp}
				// Flip only once some lease was granted: flips that kept
				// every node out from the start would leave nothing to check.
				for i := 0; granted.Load() == 0 && i < maxFlips; i++ {
					select {
					case <-done:
						return
					default:
						runtime.Gosched()
					}
				}
				for i := range maxFlips {
					select {
					case <-done:
						return
					default:
					}
					n := nodes[i%len(nodes)]
					n.SetState(states[rand.IntN(len(states))])
					switch i % 8 {
					case 1:
						n.SetSlowStart(time.Now(), time.Duration(rand.IntN(3))*time.Millisecond)
					case 5:
						n.SetAgentWeight(rand.IntN(4))
					}
					if i%16 == 0 {
						p.SetNodes(nodes[:1+rand.IntN(len(nodes))])
					}
					flipped.Add(1)
				}
			}()
			releaseTwice := func(l *Lease) {
				var rel sync.WaitGroup
				rel.Add(2)
				for range 2 {
					go func() {
						defer rel.Done()
						l.Release()
					}()
				}
				rel.Wait()
				released.Add(1)
			}
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var held []*Lease
					for range perW {
						l, err := p.Acquire(nil)
						check()
						switch {
						case err == nil:
							granted.Add(1)
							held = append(held, l)
						case errors.Is(err, ErrNoCapacity):
							refused.Add(1)
						default:
							bad.Store(err)
						}
						if len(held) >= holdMax || (err != nil && len(held) > 0) {
							releaseTwice(held[0])
							held = held[1:]
						}
					}
					for _, l := range held {
						releaseTwice(l)
					}
				}()
			}
			wg.Wait()
			close(done)
			flipWG.Wait()
			if err := bad.Load(); err != nil {
				t.Fatal(err)
			}
			if granted.Load() == 0 || granted.Load() != released.Load() {
				t.Fatalf("granted %d, released %d", granted.Load(), released.Load())
			}
			assertAllZero(t, nodes)
			t.Logf("granted %d, refused %d, flips %d", granted.Load(), refused.Load(), flipped.Load())
		})
	}
}
