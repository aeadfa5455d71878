package gateway

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// rebalanceTick is how often the rebalancer looks at the pools; a pool's
// bucket holds one tick's worth of moves (at least one).
const rebalanceTick = 100 * time.Millisecond

// rebalanceSettle bounds the wait, after a round's last move, for the
// moved clients to come back before the next round is planned; clients
// that left for good would otherwise hold the next round forever.
const rebalanceSettle = 10 * time.Second

// rebalanceIdle is how long a round that could make no move waits
// before the next plan, so a plan that finds no tunnel to move does not
// walk the registry every tick.
const rebalanceIdle = time.Second

// rebalancer moves tunnels off the nodes of [pools.rebalance] pools that
// hold more than their share, in rounds: a round plans how many tunnels
// leave each node (balancer.PlanRebalance, from the live counts), closes
// them with 1001 at the pool's rate, oldest first, then waits until
// every tunnel it closed has ended and the pool holds as many tunnels as
// when the round was planned (the moved clients are back), or
// rebalanceSettle has passed, and the next round plans from the counts
// then. Planning again only once the clients are back keeps a client in
// flight from being counted as missing, and a tunnel still closing from
// being counted twice, either of which would move more than needed. A
// reload ends the round in progress (its moves, not its wait): the next
// round plans from the new config once the moved clients are back.
//
// It is one goroutine for the whole gateway; its state is that
// goroutine's alone. It takes the registry's lock only to look tunnels
// up, never across I/O: GoAway returns at once.
type rebalancer struct {
	s     *Server
	moves *prometheus.CounterVec
	pools map[string]*poolRebalance
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once // closes stop
}

// poolRebalance is one pool's rebalancing state, kept by pool name
// across reloads (its tokens with it).
type poolRebalance struct {
	conf   conf.Rebalance
	gen    uint64 // the generation the round was planned in
	tokens float64
	last   time.Time // of the last refill
	round  *rebalanceRound
}

// rebalanceRound is one plan being carried out.
type rebalanceRound struct {
	left    map[*balancer.Node]int              // moves still to make, by node
	floor   map[*balancer.Node]int              // the node's share at plan time: never moved below it
	queue   map[*balancer.Node][]*tunnel.Tunnel // its tunnels, oldest first
	told    []*tunnel.Tunnel                    // the tunnels moved so far
	total   int                                 // the pool's tunnels at plan time
	moved   int
	planned time.Time
	last    time.Time // of the last move, or planned
}

// startRebalancer starts the loop; stopRebalancer ends it.
func startRebalancer(s *Server) *rebalancer {
	rb := &rebalancer{
		s:     s,
		moves: s.metrics.RebalanceMoves,
		pools: map[string]*poolRebalance{},
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go rb.run()
	return rb
}

// stopRebalancer ends the loop and waits for it; rb may be nil (a server
// that never started), and it may be stopped more than once.
func stopRebalancer(rb *rebalancer) {
	if rb == nil {
		return
	}
	rb.once.Do(func() { close(rb.stop) })
	<-rb.done
}

// run is the rebalancer's goroutine.
func (rb *rebalancer) run() {
	defer close(rb.done)
	t := time.NewTicker(rebalanceTick)
	defer t.Stop()
	for {
		select {
		case <-rb.stop:
			return
		case now := <-t.C:
			rb.tick(now)
		}
	}
}

// tick refills every rebalanced pool's bucket and carries its round on.
func (rb *rebalancer) tick(now time.Time) {
	g := rb.s.current()
	for name := range rb.pools {
		if p := g.pools[name]; p == nil || p.Conf.Rebalance == nil {
			delete(rb.pools, name)
		}
	}
	for name, p := range g.pools {
		rc := p.Conf.Rebalance
		if rc == nil {
			continue
		}
		ps := rb.pools[name]
		if ps == nil {
			ps = &poolRebalance{tokens: burstOf(rc.Rate), last: now}
			rb.pools[name] = ps
		}
		if ps.gen != g.n || ps.conf != *rc {
			// The round's moves end, but not its settle wait: planned
			// now, the next round would count the clients still away
			// as missing and move more than needed, at every reload
			// that came during the wait.
			if ps.round != nil {
				clear(ps.round.left)
			}
			ps.gen, ps.conf = g.n, *rc
		}
		ps.tokens = min(burstOf(rc.Rate), ps.tokens+now.Sub(ps.last).Seconds()*rc.Rate)
		ps.last = now
		rb.step(p, ps, now)
	}
}

// burstOf is the bucket size for rate: one tick's worth, at least one.
func burstOf(rate float64) float64 { return max(1, rate*rebalanceTick.Seconds()) }

// step settles, plans or carries on p's round.
func (rb *rebalancer) step(p *upstream.Pool, ps *poolRebalance, now time.Time) {
	nodes := p.Balancer.Nodes()
	if r := ps.round; r != nil && r.finished() {
		if !rb.settled(r, nodes, now) {
			return
		}
		ps.round = nil
	}
	if ps.round == nil {
		ps.round = rb.plan(nodes, ps.conf.Tolerance, now)
		if ps.round == nil {
			return
		}
		rb.s.log.Info("rebalancing", "pool", p.Name, "moves", ps.round.planMoves(), "tunnels", ps.round.total)
	}
	rb.move(p, ps, nodes, now)
}

// loads reads nodes for the balancer's planning functions.
func loads(nodes []*balancer.Node, now time.Time) []balancer.NodeLoad {
	ls := make([]balancer.NodeLoad, len(nodes))
	for i, n := range nodes {
		ls[i] = balancer.LoadOf(n, now)
	}
	return ls
}

// plan makes a round for nodes, or returns nil when nothing is to move.
func (rb *rebalancer) plan(nodes []*balancer.Node, tolerance float64, now time.Time) *rebalanceRound {
	ls := loads(nodes, now)
	moves := balancer.PlanRebalance(ls, tolerance)
	r := &rebalanceRound{left: map[*balancer.Node]int{}, floor: map[*balancer.Node]int{}, planned: now, last: now}
	for i, n := range nodes {
		r.total += ls[i].Live
		if moves[i] > 0 {
			r.left[n] = moves[i]
			r.floor[n] = balancer.Share(ls, i)
		}
	}
	if len(r.left) == 0 {
		return nil
	}
	r.queue = rb.s.tunnels.Oldest(r.left)
	return r
}

// move closes tunnels of r's nodes while p's bucket has tokens: each time
// one of the node with the most moves left, as long as that node is up,
// above its share and another node can take the client.
func (rb *rebalancer) move(p *upstream.Pool, ps *poolRebalance, nodes []*balancer.Node, now time.Time) {
	r := ps.round
	for ps.tokens >= 1 {
		var n *balancer.Node
		for m, k := range r.left {
			if k > 0 && (n == nil || k > r.left[n] || (k == r.left[n] && m.Addr() < n.Addr())) {
				n = m
			}
		}
		if n == nil {
			return
		}
		i := slices.Index(nodes, n)
		if i < 0 || n.State() != balancer.StateUp || n.Live() <= r.floor[n] || len(r.queue[n]) == 0 {
			r.left[n] = 0 // left the pool, went down or draining, or got there
			continue
		}
		if !balancer.CanTake(loads(nodes, now), i) {
			// Nowhere to go (a node went down or filled up): the round
			// ends, and the next plans from what is up then.
			clear(r.left)
			return
		}
		t := r.queue[n][0]
		r.queue[n] = r.queue[n][1:]
		if !rb.s.tunnels.Holds(t, n) {
			continue // ended meanwhile
		}
		if st := t.Stats(); st.FirstClose != 0 || st.End != 0 {
			continue // closing already: its client is leaving anyway
		}
		t.GoAway(registry.GoAwayCode, "rebalancing")
		ps.tokens--
		r.left[n]--
		r.moved++
		r.told = append(r.told, t)
		r.last = now
		rb.moves.WithLabelValues(p.Name, n.Addr()).Inc()
	}
}

// finished reports whether r has no move left to make.
func (r *rebalanceRound) finished() bool {
	for _, k := range r.left {
		if k > 0 {
			return false
		}
	}
	return true
}

// planMoves is the number of moves r was planned with and has not made.
func (r *rebalanceRound) planMoves() int {
	n := 0
	for _, k := range r.left {
		n += k
	}
	return n
}

// settled reports whether the next round may be planned after r: every
// tunnel r moved has ended and the pool holds as many tunnels as at r's
// plan (the moved clients are back), or rebalanceSettle has passed since
// r's last move; a round that moved nothing waits rebalanceIdle.
func (rb *rebalancer) settled(r *rebalanceRound, nodes []*balancer.Node, now time.Time) bool {
	if r.moved == 0 {
		return now.Sub(r.planned) >= rebalanceIdle
	}
	if now.Sub(r.last) >= rebalanceSettle {
		return true
	}
	// A moved tunnel still closing counts on its node, and would be the
	// oldest there, to be told again: wait until every one has ended.
	for len(r.told) > 0 && !rb.s.tunnels.Alive(r.told[len(r.told)-1]) {
		r.told = r.told[:len(r.told)-1]
	}
	if len(r.told) > 0 {
		return false
	}
	live := 0
	for _, n := range nodes {
		live += n.Live()
	}
	return live >= r.total
}
