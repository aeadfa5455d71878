package rebalance

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/internal/testproc"
)

// tunnels is a Tunnels whose live tunnels are the ones in alive; Oldest
// records what it was asked for and hands out no tunnel.
type tunnels struct {
	alive map[*tunnel.Tunnel]bool
	asked []map[*balancer.Node]int
}

func (f *tunnels) Oldest(want map[*balancer.Node]int) map[*balancer.Node][]*tunnel.Tunnel {
	f.asked = append(f.asked, want)
	return map[*balancer.Node][]*tunnel.Tunnel{}
}

func (f *tunnels) Holds(t *tunnel.Tunnel, _ *balancer.Node) bool { return f.alive[t] }

func (f *tunnels) Alive(t *tunnel.Tunnel) bool { return f.alive[t] }

// gateway is a Gateway serving pools at generation gen and counting moves.
type gateway struct {
	mu    sync.Mutex
	gen   uint64
	pools []Pool
	moves int
}

func (g *gateway) Pools() (uint64, []Pool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen, g.pools
}

func (g *gateway) Moved(string, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.moves++
}

// nodes returns up nodes A, B, ... holding lives[i] tunnels each.
func nodes(t *testing.T, lives ...int) []*balancer.Node {
	t.Helper()
	var ns []*balancer.Node
	for i, live := range lives {
		n := balancer.NewNode(fmt.Sprintf("10.0.0.%d:80", i+1), 1, 0)
		for range live {
			if _, ok := n.TryAcquire(); !ok {
				t.Fatal("node refused a lease")
			}
		}
		ns = append(ns, n)
	}
	return ns
}

// TestPlan plans rounds from the nodes' live counts: how many leave each
// node over its share, the share it is never moved below, the pool's
// tunnels, and the registry asked for the oldest of those nodes only.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lives     []int
		down      int // index of a node not up, -1 for none
		tolerance float64
		left      []int // by node; nil: no round
		floor     []int
	}{
		{"one empty node", []int{30, 0}, -1, 0.1, []int{15, 0}, []int{15, 0}},
		{"a node joins two", []int{40, 20, 0}, -1, 0.05, []int{20, 0, 0}, []int{20, 0, 0}},
		{"within the tolerance", []int{21, 19}, -1, 0.1, nil, nil},
		{"balanced", []int{10, 10, 10}, -1, 0.1, nil, nil},
		{"the empty node is down", []int{30, 0}, 1, 0.1, nil, nil},
		{"nothing at all", []int{0, 0}, -1, 0.1, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := nodes(t, tc.lives...)
			if tc.down >= 0 {
				ns[tc.down].SetState(balancer.StateDown)
			}
			f := &tunnels{}
			rb := &Rebalancer{tunnels: f}
			now := time.Now()
			r := rb.plan(ns, tc.tolerance, now)
			if tc.left == nil {
				if r != nil || len(f.asked) != 0 {
					t.Fatalf("plan = %+v, registry asked %v; want no round", r, f.asked)
				}
				return
			}
			if r == nil {
				t.Fatal("no round")
			}
			total := 0
			for i, n := range ns {
				total += tc.lives[i]
				if r.left[n] != tc.left[i] || r.floor[n] != tc.floor[i] {
					t.Errorf("node %d: left %d floor %d, want %d and %d", i, r.left[n], r.floor[n], tc.left[i], tc.floor[i])
				}
				if _, in := r.left[n]; in != (tc.left[i] > 0) {
					t.Errorf("node %d in the plan: %v", i, in)
				}
			}
			if r.total != total || !r.planned.Equal(now) || !r.last.Equal(now) || r.planMoves() != tc.left[0] || r.finished() {
				t.Errorf("round: total %d planned %v last %v moves %d finished %v", r.total, r.planned, r.last, r.planMoves(), r.finished())
			}
			if len(f.asked) != 1 || fmt.Sprint(f.asked[0]) != fmt.Sprint(r.left) {
				t.Errorf("registry asked %v, want the oldest of %v", f.asked, r.left)
			}
		})
	}
}

// TestSettled decides when the round after r may be planned: a round
// that moved nothing waits idleWait; one that moved waits until every
// tunnel it told has ended and the pool is back to its count at plan
// time, or SettleTimeout after its last move.
func TestSettled(t *testing.T) {
	told := []*tunnel.Tunnel{new(tunnel.Tunnel), new(tunnel.Tunnel)}
	now := time.Now()
	for _, tc := range []struct {
		name    string
		moved   int
		since   time.Duration // since the plan, and since the last move
		alive   []bool        // of told
		lives   []int
		total   int
		settled bool
	}{
		{"idle, early", 0, idleWait - time.Millisecond, nil, []int{10, 0}, 10, false},
		{"idle, waited", 0, idleWait, nil, []int{10, 0}, 10, true},
		{"a told tunnel still closing", 2, time.Second, []bool{false, true}, []int{8, 2}, 10, false},
		{"clients still away", 2, time.Second, []bool{false, false}, []int{8, 1}, 10, false},
		{"clients back", 2, time.Second, []bool{false, false}, []int{8, 2}, 10, true},
		{"more clients than planned", 2, time.Second, []bool{false, false}, []int{9, 3}, 10, true},
		{"settle timeout, still away", 2, SettleTimeout, []bool{true, true}, []int{5, 0}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &tunnels{alive: map[*tunnel.Tunnel]bool{}}
			r := &round{moved: tc.moved, total: tc.total, planned: now.Add(-tc.since), last: now.Add(-tc.since)}
			for i, a := range tc.alive {
				r.told = append(r.told, told[i])
				f.alive[told[i]] = a
			}
			rb := &Rebalancer{tunnels: f}
			if got := rb.settled(r, nodes(t, tc.lives...), now); got != tc.settled {
				t.Fatalf("settled = %v, want %v", got, tc.settled)
			}
		})
	}
}

// TestBurstOf sizes a pool's bucket: one tick's worth of moves, at least
// one.
func TestBurstOf(t *testing.T) {
	for rate, want := range map[float64]float64{0.5: 1, 10: 1, 50: 5, 100: 10, 1000: 100} {
		if got := burstOf(rate); got != want {
			t.Errorf("burstOf(%v) = %v, want %v", rate, got, want)
		}
	}
}

// TestTickTracksPools runs ticks on a clock of the test's own: a pool
// with a [pools.rebalance] table is tracked and planned for, a round
// that finds no tunnel to move waits idleWait before the next plan, and
// a pool that loses its table (or goes) is forgotten.
func TestTickTracksPools(t *testing.T) {
	var logs testproc.Buffer
	f := &tunnels{}
	ns := nodes(t, 30, 0)
	g := &gateway{gen: 1, pools: []Pool{{Name: "relay", Nodes: ns, Rebalance: conf.Rebalance{Tolerance: 0.1, Rate: 50}}}}
	rb := &Rebalancer{gw: g, tunnels: f, log: slog.New(slog.NewTextHandler(&logs, nil)), pools: map[string]*poolState{}}
	now := time.Now()
	tick := func(n int) {
		for range n {
			now = now.Add(TickInterval)
			rb.Tick(now)
		}
	}
	tick(1)
	if rb.Tracked() != 1 || len(f.asked) != 1 || strings.Count(logs.String(), "msg=rebalancing") != 1 {
		t.Fatalf("after a tick: tracked %d, plans %d, log:\n%s", rb.Tracked(), len(f.asked), logs.String())
	}
	if ps := rb.pools["relay"]; ps.tokens != burstOf(50) || ps.gen != 1 || ps.round == nil || !ps.round.finished() {
		t.Fatalf("pool state %+v: want a full bucket and the round that found nothing to move", ps)
	}
	tick(int(idleWait/TickInterval) - 1)
	if len(f.asked) != 1 {
		t.Fatalf("planned %d times within idleWait, want once", len(f.asked))
	}
	tick(1)
	if len(f.asked) != 2 || g.moves != 0 {
		t.Fatalf("planned %d times after idleWait, moved %d; want twice and none", len(f.asked), g.moves)
	}
	g.mu.Lock()
	g.gen, g.pools = 2, nil
	g.mu.Unlock()
	tick(1)
	if rb.Tracked() != 0 {
		t.Fatalf("tracked %d pools after the table went, want 0", rb.Tracked())
	}
}

// TestStop stops a started loop, twice, and a nil one.
func TestStop(t *testing.T) {
	rb := Start(&gateway{}, &tunnels{}, slog.Default())
	rb.Stop()
	select {
	case <-rb.Done():
	default:
		t.Fatal("the loop runs after Stop")
	}
	rb.Stop()
	var none *Rebalancer
	none.Stop()
}
