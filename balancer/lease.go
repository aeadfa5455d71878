package balancer

import "sync/atomic"

// Lease is one acquired slot on a node, held for the life of a tunnel.
//
// A Lease is safe for concurrent use and must not be copied. Release is
// idempotent: the first call frees the slot, later calls (from any
// goroutine) do nothing, so every exit path may call it.
type Lease struct {
	_        noCopy
	node     *Node
	released atomic.Bool
}

// Node returns the node the lease is held on, or nil for a nil lease.
func (l *Lease) Node() *Node {
	if l == nil {
		return nil
	}
	return l.node
}

// Release frees the slot: the first call decrements the node's live count,
// later calls do nothing. Calling it on a nil lease does nothing.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	if l.released.CompareAndSwap(false, true) {
		l.node.live.Add(-1)
	}
}
