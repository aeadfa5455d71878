package balancer

import (
	"math/bits"
	"math/rand/v2"
)

// LeastConn picks the candidate with the fewest live leases per unit of
// weight, so a node of weight 2 carries twice the tunnels of a node of
// weight 1. Ties are broken uniformly at random.
//
// The zero value is ready to use. A LeastConn is stateless and safe for
// concurrent use.
type LeastConn struct{}

// Pick returns the candidate with the lowest live/weight ratio, comparing
// live_a*weight_b with live_b*weight_a in exact integer arithmetic. Among
// equal candidates each is chosen with equal probability. It returns nil for
// an empty slice.
func (*LeastConn) Pick(candidates []*Node) *Node {
	var best *Node
	var bestLive, bestWeight uint64
	ties := 0
	for _, n := range candidates {
		live, weight := nonNeg(n.live.Load()), nonNeg(n.weight.Load())
		if best == nil {
			best, bestLive, bestWeight, ties = n, live, weight, 1
			continue
		}
		switch cmpRatio(live, weight, bestLive, bestWeight) {
		case -1:
			best, bestLive, bestWeight, ties = n, live, weight, 1
		case 0:
			// Reservoir sampling: the k-th tied node replaces the
			// current choice with probability 1/k, which leaves every
			// tied node equally likely.
			ties++
			if rand.IntN(ties) == 0 {
				best, bestLive, bestWeight = n, live, weight
			}
		}
	}
	return best
}

// cmpRatio compares la/wa with lb/wb as la*wb versus lb*wa in 128-bit
// arithmetic, so no product can overflow. It returns -1, 0 or +1.
func cmpRatio(la, wa, lb, wb uint64) int {
	ah, al := bits.Mul64(la, wb)
	bh, bl := bits.Mul64(lb, wa)
	switch {
	case ah < bh || (ah == bh && al < bl):
		return -1
	case ah == bh && al == bl:
		return 0
	}
	return 1
}

// nonNeg converts a count that is never negative in a correct program to
// uint64, clamping a negative value to 0 rather than wrapping it.
func nonNeg(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

var _ Picker = (*LeastConn)(nil)
