package balancer

import "sync"

// Registry keeps the nodes of every pool by pool name and address across
// config generations, so that a node is one [Node] for as long as anything
// holds a lease on it: a config that drops an address while tunnels to it
// are open, then names it again, gets the same node back, with its live
// count against its cap, rather than a fresh one at zero that would let
// the cap be overshot.
//
// The same address in two pools is two nodes, each with its own cap and
// count, as the pools' own settings and health checks are separate.
//
// The zero Registry is empty and ready to use. A Registry is safe for
// concurrent use and must not be copied after first use.
type Registry struct {
	_     noCopy
	mu    sync.Mutex
	nodes map[nodeKey]*Node
}

// nodeKey names a node in a Registry.
type nodeKey struct{ pool, addr string }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{nodes: make(map[nodeKey]*Node)}
}

// Node returns the node registered for addr in pool, registering a new
// one from weight and maxConns (as [NewNode]) when there is none. A node
// already registered keeps its settings, count and state: the caller sets
// the new weight and cap when it puts the node to use. fresh reports
// whether the node was made by this call.
func (r *Registry) Node(pool, addr string, weight, maxConns int) (n *Node, fresh bool) {
	k := nodeKey{pool, addr}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.nodes[k]; n != nil {
		return n, false
	}
	if r.nodes == nil {
		r.nodes = make(map[nodeKey]*Node)
	}
	n = NewNode(addr, weight, maxConns)
	r.nodes[k] = n
	return n, true
}

// Forget drops every node that holds no lease and that keep does not
// claim (keep names the nodes still in use, such as those of the running
// config), and returns how many it dropped. A node dropped while a lease
// on it could still be taken would let its address start again from
// zero, so keep must claim every node a picker may still choose.
func (r *Registry) Forget(keep func(*Node) bool) int {
	return len(r.ForgetNodes(keep))
}

// ForgetNodes is Forget returning the pool and address of each node it
// dropped, so the caller can drop what it keeps by them (metric series).
func (r *Registry) ForgetNodes(keep func(*Node) bool) []NodeRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	var dropped []NodeRef
	for k, n := range r.nodes {
		if n.Live() == 0 && !keep(n) {
			delete(r.nodes, k)
			dropped = append(dropped, NodeRef{Pool: k.pool, Addr: k.addr})
		}
	}
	return dropped
}

// NodeRef names a node of a Registry: its pool and address.
type NodeRef struct{ Pool, Addr string }

// Len returns how many nodes the registry holds.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.nodes)
}
