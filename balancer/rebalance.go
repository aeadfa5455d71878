package balancer

import (
	"math"
	"time"
)

// NodeLoad is one node as [PlanRebalance] sees it: a plain value, read
// from a [Node] by [LoadOf] or written by hand in a test.
type NodeLoad struct {
	// Live is the node's open tunnels.
	Live int
	// Weight is the node's share weight, in any unit common to the pool
	// (the gateway passes [Node.EffectiveWeight]); below 1 counts as 1.
	Weight int
	// MaxConns is the node's cap, 0 meaning unlimited.
	MaxConns int
	// Eligible says the node is up (healthy, not draining, not removed):
	// only eligible nodes count in the average, give tunnels or take them.
	Eligible bool
}

// LoadOf reads n's load at now: its live count, its effective weight
// (agent or configured weight, ramped during slow start: what
// [LeastConn] weighs it by), its cap, and whether it is in [StateUp].
func LoadOf(n *Node, now time.Time) NodeLoad {
	return NodeLoad{Live: n.Live(), Weight: n.EffectiveWeight(now), MaxConns: n.MaxConns(), Eligible: n.State() == StateUp}
}

// Share is a node's fair number of tunnels: the eligible nodes' tunnels
// split in proportion to their weights, rounded up. It is 0 for a node
// that is not eligible.
func Share(loads []NodeLoad, i int) int {
	total, weights := eligibleSums(loads)
	if !loads[i].Eligible || weights == 0 {
		return 0
	}
	return ceilShare(total, max(loads[i].Weight, 1), weights)
}

// eligibleSums is the eligible nodes' tunnels and weights.
func eligibleSums(loads []NodeLoad) (total, weights int) {
	for _, l := range loads {
		if l.Eligible {
			total += max(l.Live, 0)
			weights += max(l.Weight, 1)
		}
	}
	return total, weights
}

// ceilShare is ⌈total·w/weights⌉ in exact arithmetic where it fits.
func ceilShare(total, w, weights int) int {
	if total <= math.MaxInt32 && w <= math.MaxInt32 {
		return (total*w + weights - 1) / weights
	}
	return int(math.Ceil(float64(total) * float64(w) / float64(weights)))
}

// PlanRebalance says how many tunnels to move off each node so that the
// eligible nodes come back within tolerance of their share (see [Share]),
// and returns the counts by index of loads (all zero: nothing to do).
//
// A node gives tunnels only when it holds more than its share by more
// than tolerance (a fraction of the share: 0.1 is 10%), and then only
// down to its share, never below. The tunnels moved must have somewhere
// to go: the nodes below their share take at most up to their share, and
// at most up to their cap; when they cannot take every tunnel over the
// shares, the moves go to the most loaded givers first (by live count per
// unit of weight), so the highest load comes down first. With fewer than
// two eligible nodes nothing moves.
func PlanRebalance(loads []NodeLoad, tolerance float64) []int {
	moves := make([]int, len(loads))
	total, weights := eligibleSums(loads)
	eligible := 0
	for _, l := range loads {
		if l.Eligible {
			eligible++
		}
	}
	if eligible < 2 || total == 0 {
		return moves
	}
	var excess, room int
	shares := make([]int, len(loads))
	for i, l := range loads {
		if !l.Eligible {
			continue
		}
		w := max(l.Weight, 1)
		shares[i] = ceilShare(total, w, weights)
		exact := float64(total) * float64(w) / float64(weights)
		switch {
		case float64(l.Live) > exact*(1+tolerance):
			moves[i] = l.Live - shares[i]
			excess += moves[i]
		case l.Live < shares[i]:
			r := shares[i] - l.Live
			if l.MaxConns > 0 {
				r = min(r, max(l.MaxConns-l.Live, 0))
			}
			room += r
		}
	}
	if excess <= room {
		return moves
	}
	// Fewer places than tunnels over the shares: hand the places out one
	// at a time to the giver with the highest load left per unit of
	// weight. room is bounded by the tunnels the pool holds.
	want := moves
	moves = make([]int, len(loads))
	for range room {
		best := -1
		for i, w := range want {
			if moves[i] >= w {
				continue
			}
			if best < 0 || cmpLeft(loads, moves, i, best) > 0 {
				best = i
			}
		}
		moves[best]++
	}
	return moves
}

// cmpLeft compares the load left on givers i and j after moves, per unit
// of weight.
func cmpLeft(loads []NodeLoad, moves []int, i, j int) int {
	li, lj := uint64(loads[i].Live-moves[i]), uint64(loads[j].Live-moves[j])
	return cmpRatio(li, uint64(max(loads[i].Weight, 1)), lj, uint64(max(loads[j].Weight, 1)))
}

// CanTake reports whether a tunnel moved off node giver has somewhere to
// go: another eligible node under its cap that holds fewer tunnels per
// unit of weight than giver will once the tunnel has left, so least
// connections places the reconnecting client there rather than back on
// giver.
func CanTake(loads []NodeLoad, giver int) bool {
	g := loads[giver]
	if g.Live < 1 {
		return false
	}
	for i, l := range loads {
		if i == giver || !l.Eligible || (l.MaxConns > 0 && l.Live >= l.MaxConns) {
			continue
		}
		if cmpRatio(uint64(max(l.Live, 0)), uint64(max(l.Weight, 1)), uint64(g.Live-1), uint64(max(g.Weight, 1))) < 0 {
			return true
		}
	}
	return false
}
