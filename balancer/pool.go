package balancer

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// ErrNoCapacity is returned (wrapped with the pool name) by [Pool.Acquire]
// when no node can take a new tunnel: none is up, or every up node is at its
// cap or excluded. The gateway answers 503 with Retry-After (or close 1013).
// Raise max_conns on the nodes or add nodes to the pool.
var ErrNoCapacity = errors.New("balancer: no node with capacity")

// stackCandidates is how many candidates Acquire filters into an array on
// its stack; larger pools spill to one heap allocation per acquire.
const stackCandidates = 64

// Pool is a named set of nodes with a picker policy.
//
// A Pool is safe for concurrent use: Acquire may run while SetNodes swaps
// the node set. It must not be copied after first use.
type Pool struct {
	_      noCopy
	name   string
	picker Picker
	nodes  atomic.Pointer[[]*Node]
}

// NewPool returns a pool named name that chooses among nodes with picker.
// A nil picker means [LeastConn]. The pool keeps its own copy of the nodes
// slice (the nodes themselves are shared).
func NewPool(name string, picker Picker, nodes []*Node) *Pool {
	if picker == nil {
		picker = &LeastConn{}
	}
	p := &Pool{name: name, picker: picker}
	p.SetNodes(nodes)
	return p
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Nodes returns the current snapshot of the pool's nodes. Callers must not
// modify the returned slice.
func (p *Pool) Nodes() []*Node { return *p.nodes.Load() }

// SetNodes atomically replaces the pool's node set with a copy of nodes.
// Leases taken on nodes that leave the set stay valid and release normally.
func (p *Pool) SetNodes(nodes []*Node) {
	s := slices.Clone(nodes)
	if s == nil {
		s = []*Node{}
	}
	p.nodes.Store(&s)
}

// Acquire picks an eligible node (in [StateUp], under its cap and not in
// exclude) with the pool's picker and takes a lease on it. If a concurrent
// acquire fills the chosen node in between, Acquire drops that candidate and
// picks again, at most once per node. It returns an error wrapping
// [ErrNoCapacity] when no eligible node has a free slot.
func (p *Pool) Acquire(exclude []*Node) (*Lease, error) {
	return p.AcquireKey(exclude, nil)
}

// AcquireKey is [Pool.Acquire] for a request carrying key: a picker that
// is a [KeyPicker] chooses by it (a [Hash] sends every key to the same
// node while that node is within its bounded load); other pickers ignore
// it. An empty key means the request carried none. The pool does not keep
// key.
func (p *Pool) AcquireKey(exclude []*Node, key []byte) (*Lease, error) {
	nodes := p.Nodes()
	var buf [stackCandidates]*Node
	cands := buf[:0]
	for _, n := range nodes {
		if n.State() == StateUp && !n.atCap() && !slices.Contains(exclude, n) {
			cands = append(cands, n)
		}
	}
	var clk clock
	var kh uint64
	if len(key) > 0 {
		kh = hashKey(key) // once, whatever the retries
	}
	for range len(nodes) {
		if len(cands) == 0 {
			break
		}
		n := p.pick(cands, &clk, key, kh)
		if n == nil {
			break
		}
		if l, ok := n.TryAcquire(); ok {
			return l, nil
		}
		i := slices.Index(cands, n)
		if i < 0 {
			break // the picker returned a node it was not offered
		}
		cands = slices.Delete(cands, i, i+1)
	}
	return nil, fmt.Errorf("acquire from pool %q: %w", p.name, ErrNoCapacity)
}

// pick calls the picker. The built-in pickers are called directly so the
// compiler can see they do not keep the candidates, which lets Acquire's
// candidate array stay on its stack; any other picker gets a heap copy.
// clk is shared by the picks of one acquire, so it reads the time at most
// once. key is the request's key (empty: none) and kh its hash.
func (p *Pool) pick(cands []*Node, clk *clock, key []byte, kh uint64) *Node {
	switch pk := p.picker.(type) {
	case *LeastConn:
		return pk.pick(cands, clk)
	case *RoundRobin:
		return pk.Pick(cands)
	case *P2C:
		return pk.pick(cands, clk)
	case *Hash:
		if len(key) == 0 {
			return pk.lc.pick(cands, clk)
		}
		return pk.pick(cands, kh, clk)
	}
	if kp, ok := p.picker.(KeyPicker); ok && len(key) > 0 {
		return kp.PickKey(slices.Clone(cands), key)
	}
	return p.picker.Pick(slices.Clone(cands))
}
