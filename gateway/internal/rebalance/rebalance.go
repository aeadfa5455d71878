// Package rebalance moves tunnels off the nodes of [pools.rebalance]
// pools that hold more than their share, so that a node that joins (or
// comes back) gets its share of the clients without waiting for them to
// reconnect on their own. It reads the pools through the Gateway interface
// and the live tunnels through the Tunnels interface; the gateway wires
// both.
package rebalance

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// TickInterval is how often the rebalancer looks at the pools; a pool's
// bucket holds one tick's worth of moves (at least one).
const TickInterval = 100 * time.Millisecond

// SettleTimeout bounds the wait, after a round's last move, for the
// moved clients to come back before the next round is planned; clients
// that left for good would otherwise hold the next round forever.
const SettleTimeout = 10 * time.Second

// idleWait is how long a round that could make no move waits
// before the next plan, so a plan that finds no tunnel to move does not
// walk the registry every tick.
const idleWait = time.Second

// Pool is one rebalanced pool as the rebalancer reads it at a tick.
type Pool struct {
	// Name is the pool's name: its rebalancing state is kept by it
	// across reloads.
	Name string
	// Nodes are the pool's nodes now.
	Nodes []*balancer.Node
	// Rebalance is the pool's [pools.rebalance] table.
	Rebalance conf.Rebalance
}

// Gateway is the gateway as the rebalancer reads it.
type Gateway interface {
	// Pools returns the number of the config generation in force and
	// its pools that have a [pools.rebalance] table, read together.
	Pools() (gen uint64, pools []Pool)
	// Moved counts one tunnel moved off the node at addr in pool.
	Moved(pool, addr string)
}

// Tunnels is the registry of live tunnels as the rebalancer reads it;
// *registry.Tunnels is one.
type Tunnels interface {
	// Oldest returns, for every node of want, its live tunnels oldest
	// first, at least as many as want names when it has them.
	Oldest(want map[*balancer.Node]int) map[*balancer.Node][]*tunnel.Tunnel
	// Holds reports whether t is live and runs to n.
	Holds(t *tunnel.Tunnel, n *balancer.Node) bool
	// Alive reports whether t is live.
	Alive(t *tunnel.Tunnel) bool
}

// Rebalancer moves tunnels off the nodes of [pools.rebalance] pools that
// hold more than their share, in rounds: a round plans how many tunnels
// leave each node (balancer.PlanRebalance, from the live counts), closes
// them with 1001 at the pool's rate, oldest first, then waits until
// every tunnel it closed has ended and the pool holds as many tunnels as
// when the round was planned (the moved clients are back), or
// SettleTimeout has passed, and the next round plans from the counts
// then. Planning again only once the clients are back keeps a client in
// flight from being counted as missing, and a tunnel still closing from
// being counted twice, either of which would move more than needed. A
// reload ends the round in progress (its moves, not its wait): the next
// round plans from the new config once the moved clients are back.
//
// It is one goroutine for the whole gateway; its state is that
// goroutine's alone. It takes the registry's lock only to look tunnels
// up, never across I/O: GoAway returns at once.
type Rebalancer struct {
	gw      Gateway
	tunnels Tunnels
	log     *slog.Logger
	pools   map[string]*poolState
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once // closes stop
}

// poolState is one pool's rebalancing state, kept by pool name
// across reloads (its tokens with it).
type poolState struct {
	conf   conf.Rebalance
	gen    uint64 // the generation the round was planned in
	tokens float64
	last   time.Time // of the last refill
	round  *round
}

// round is one plan being carried out.
type round struct {
	left    map[*balancer.Node]int              // moves still to make, by node
	floor   map[*balancer.Node]int              // the node's share at plan time: never moved below it
	queue   map[*balancer.Node][]*tunnel.Tunnel // its tunnels, oldest first
	told    []*tunnel.Tunnel                    // the tunnels moved so far
	total   int                                 // the pool's tunnels at plan time
	moved   int
	planned time.Time
	last    time.Time // of the last move, or planned
}

// Start starts the loop, which ticks every TickInterval until Stop.
func Start(gw Gateway, tunnels Tunnels, log *slog.Logger) *Rebalancer {
	rb := &Rebalancer{
		gw:      gw,
		tunnels: tunnels,
		log:     log,
		pools:   map[string]*poolState{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go rb.run()
	return rb
}

// Stop ends the loop and waits for it; rb may be nil (a server that
// never started), and it may be stopped more than once.
func (rb *Rebalancer) Stop() {
	if rb == nil {
		return
	}
	rb.once.Do(func() { close(rb.stop) })
	<-rb.done
}

// Done is closed once the loop has ended.
func (rb *Rebalancer) Done() <-chan struct{} { return rb.done }

// Tracked is how many pools rb keeps rebalancing state for. It reads
// the loop's state: call it only once the loop is stopped.
func (rb *Rebalancer) Tracked() int { return len(rb.pools) }

// run is the rebalancer's goroutine.
func (rb *Rebalancer) run() {
	defer close(rb.done)
	t := time.NewTicker(TickInterval)
	defer t.Stop()
	for {
		select {
		case <-rb.stop:
			return
		case now := <-t.C:
			rb.Tick(now)
		}
	}
}

// Tick refills every rebalanced pool's bucket and carries its round on,
// as of now. The loop calls it every TickInterval; once the loop is
// stopped, a test may call it on a clock of its own.
func (rb *Rebalancer) Tick(now time.Time) {
	gen, pools := rb.gw.Pools()
	for name := range rb.pools {
		if !slices.ContainsFunc(pools, func(p Pool) bool { return p.Name == name }) {
			delete(rb.pools, name)
		}
	}
	for _, p := range pools {
		rc := p.Rebalance
		ps := rb.pools[p.Name]
		if ps == nil {
			ps = &poolState{tokens: burstOf(rc.Rate), last: now}
			rb.pools[p.Name] = ps
		}
		if ps.gen != gen || ps.conf != rc {
			// The round's moves end, but not its settle wait: planned
			// now, the next round would count the clients still away
			// as missing and move more than needed, at every reload
			// that came during the wait.
			if ps.round != nil {
				clear(ps.round.left)
			}
			ps.gen, ps.conf = gen, rc
		}
		ps.tokens = min(burstOf(rc.Rate), ps.tokens+now.Sub(ps.last).Seconds()*rc.Rate)
		ps.last = now
		rb.step(p, ps, now)
	}
}

// burstOf is the bucket size for rate: one tick's worth, at least one.
func burstOf(rate float64) float64 { return max(1, rate*TickInterval.Seconds()) }

// step settles, plans or carries on p's round.
func (rb *Rebalancer) step(p Pool, ps *poolState, now time.Time) {
	nodes := p.Nodes
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
		rb.log.Info("rebalancing", "pool", p.Name, "moves", ps.round.planMoves(), "tunnels", ps.round.total)
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
func (rb *Rebalancer) plan(nodes []*balancer.Node, tolerance float64, now time.Time) *round {
	ls := loads(nodes, now)
	moves := balancer.PlanRebalance(ls, tolerance)
	r := &round{left: map[*balancer.Node]int{}, floor: map[*balancer.Node]int{}, planned: now, last: now}
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
	r.queue = rb.tunnels.Oldest(r.left)
	return r
}

// move closes tunnels of r's nodes while p's bucket has tokens: each time
// one of the node with the most moves left, as long as that node is up,
// above its share and another node can take the client.
func (rb *Rebalancer) move(p Pool, ps *poolState, nodes []*balancer.Node, now time.Time) {
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
		if !rb.tunnels.Holds(t, n) {
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
		rb.gw.Moved(p.Name, n.Addr())
	}
}

// finished reports whether r has no move left to make.
func (r *round) finished() bool {
	for _, k := range r.left {
		if k > 0 {
			return false
		}
	}
	return true
}

// planMoves is the number of moves r was planned with and has not made.
func (r *round) planMoves() int {
	n := 0
	for _, k := range r.left {
		n += k
	}
	return n
}

// settled reports whether the next round may be planned after r: every
// tunnel r moved has ended and the pool holds as many tunnels as at r's
// plan (the moved clients are back), or SettleTimeout has passed since
// r's last move; a round that moved nothing waits idleWait.
func (rb *Rebalancer) settled(r *round, nodes []*balancer.Node, now time.Time) bool {
	if r.moved == 0 {
		return now.Sub(r.planned) >= idleWait
	}
	if now.Sub(r.last) >= SettleTimeout {
		return true
	}
	// A moved tunnel still closing counts on its node, and would be the
	// oldest there, to be told again: wait until every one has ended.
	for len(r.told) > 0 && !rb.tunnels.Alive(r.told[len(r.told)-1]) {
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

var _ Tunnels = (*registry.Tunnels)(nil)
