package balancer

import "sync/atomic"

// RoundRobin picks candidates in turn, ignoring weights and live counts.
// The rotation runs over the filtered candidates of each pick, so nodes that
// are down, draining, full or excluded are skipped.
//
// The zero value is ready to use. A RoundRobin is safe for concurrent use
// and must not be copied after first use.
type RoundRobin struct {
	next atomic.Uint64
}

// Pick returns the next candidate in rotation, or nil for an empty slice.
func (r *RoundRobin) Pick(candidates []*Node) *Node {
	if len(candidates) == 0 {
		return nil
	}
	i := r.next.Add(1) - 1
	return candidates[i%uint64(len(candidates))]
}

var _ Picker = (*RoundRobin)(nil)
