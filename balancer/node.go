package balancer

import (
	"strconv"
	"sync/atomic"
)

// State is a node's eligibility as the balancer sees it. The balancer only
// reads it; a health checker or the admin API sets it with [Node.SetState].
type State uint32

const (
	// StateUp means the node takes new connections.
	StateUp State = iota
	// StateDown means the node failed health checks or is unreachable; it
	// takes no new connections.
	StateDown
	// StateDraining means the node takes no new connections while its
	// existing tunnels stay open.
	StateDraining
	// StateDrained means the node was draining and holds no live
	// connection any more; it takes no new connections.
	StateDrained
	// StateEjected means passive failures (dials, upstream handshakes)
	// took the node out for a cool-down; it takes no new connections.
	StateEjected
)

// String returns "up", "down", "draining", "drained" or "ejected", or
// "State(N)" for an unknown value.
func (s State) String() string {
	switch s {
	case StateUp:
		return "up"
	case StateDown:
		return "down"
	case StateDraining:
		return "draining"
	case StateDrained:
		return "drained"
	case StateEjected:
		return "ejected"
	}
	return "State(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// maxCASAttempts bounds the compare-and-swap loop in TryAcquire. Every failed
// attempt means another goroutine changed the count in between, so the limit
// is never reached in practice; it only keeps the loop bounded.
const maxCASAttempts = 1 << 20

// noCopy makes go vet's copylocks check report copies of the type that
// embeds it.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// Node is one backend address with its weight, connection cap, state and
// count of live leases.
//
// A Node is safe for concurrent use and must not be copied after first use;
// share it by pointer.
type Node struct {
	_           noCopy
	addr        string
	keySeed     uint64 // hashKey(addr): the node's side of a rendezvous score
	weight      atomic.Int64
	agentWeight atomic.Int64
	maxConns    atomic.Int64
	live        atomic.Int64
	others      atomic.Int64 // other gateways' live count, see SetOthers
	state       atomic.Uint32
	slow        atomic.Pointer[slowStart] // nil: no ramp in progress
}

// NewNode returns a node for addr in [StateUp] with no leases. A weight
// below 1 becomes 1; maxConns of 0 or less means unlimited.
func NewNode(addr string, weight, maxConns int) *Node {
	n := &Node{addr: addr, keySeed: hashKey([]byte(addr))}
	n.SetWeight(weight)
	n.SetMaxConns(maxConns)
	return n
}

// Addr returns the node's address as given to [NewNode].
func (n *Node) Addr() string { return n.addr }

// Weight returns the node's relative weight (at least 1).
func (n *Node) Weight() int { return int(n.weight.Load()) }

// SetWeight sets the node's configured relative weight; a value below 1
// becomes 1 and a value above 2^50 becomes 2^50 (so a weight times
// [WeightScale] fits in 64 bits). It applies to the next pick.
func (n *Node) SetWeight(w int) {
	n.weight.Store(int64(min(max(w, 1), maxWeight)))
}

// AgentWeight returns the weight the node's agent asked for, 0 meaning none.
func (n *Node) AgentWeight() int { return int(n.agentWeight.Load()) }

// SetAgentWeight sets the weight the node's own agent asked for in its
// health answer; while it is not 0 it replaces the configured [Node.Weight]
// in every pick. 0 or less means none (use the configured weight); values
// above [MaxAgentWeight] become MaxAgentWeight. It applies to the next pick.
func (n *Node) SetAgentWeight(w int) {
	n.agentWeight.Store(int64(min(max(w, 0), MaxAgentWeight)))
}

// MaxConns returns the node's cap on live leases, 0 meaning unlimited.
func (n *Node) MaxConns() int { return int(n.maxConns.Load()) }

// SetMaxConns sets the node's cap on live leases; 0 or less means
// unlimited. It applies to the next acquire and never evicts: lowering the
// cap below [Node.Live] only blocks new leases until enough are released.
func (n *Node) SetMaxConns(c int) {
	if c < 0 {
		c = 0
	}
	n.maxConns.Store(int64(c))
}

// Live returns the number of leases currently held on the node.
func (n *Node) Live() int { return int(n.live.Load()) }

// Others returns the other gateways' live count on the node last set with
// [Node.SetOthers] (0 if never set).
func (n *Node) Others() int { return int(n.others.Load()) }

// SetOthers sets how many tunnels other gateways in front of the same node
// hold, as they last reported them; a value below 0 becomes 0. The
// least-loaded policies ([LeastConn], [P2C]) compare live + others, so
// gateways that share their counts balance the node's whole load; the cap
// ([Node.MaxConns]) stays on this gateway's own leases. It applies to the
// next pick.
func (n *Node) SetOthers(c int) { n.others.Store(int64(max(c, 0))) }

// load is the count the least-loaded policies compare: this gateway's live
// leases plus the other gateways' last reported count.
func (n *Node) load() uint64 { return nonNeg(n.live.Load()) + nonNeg(n.others.Load()) }

// State returns the node's current state.
func (n *Node) State() State { return State(n.state.Load()) }

// SetState sets the node's state. It applies to the next acquire; existing
// leases are untouched.
func (n *Node) SetState(s State) { n.state.Store(uint32(s)) }

// atCap reports whether the node had no free slot at the moment of the read.
// It is a hint for filtering; TryAcquire is the authority.
func (n *Node) atCap() bool {
	c := n.maxConns.Load()
	return c > 0 && n.live.Load() >= c
}

// TryAcquire takes a lease on the node if it is under its cap, raising the
// live count with one compare-and-swap loop so concurrent callers never
// push it past the cap. It does not check the node's state; [Pool.Acquire]
// does. It reports false when the node is at its cap.
func (n *Node) TryAcquire() (*Lease, bool) {
	for range maxCASAttempts {
		cur := n.live.Load()
		if c := n.maxConns.Load(); c > 0 && cur >= c {
			return nil, false
		}
		if n.live.CompareAndSwap(cur, cur+1) {
			return &Lease{node: n}, true
		}
	}
	return nil, false
}
