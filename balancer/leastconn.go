package balancer

import (
	"math/bits"
	"math/rand/v2"
)

// LeastConn picks the candidate with the fewest live leases (plus the
// other gateways' count, see [Node.SetOthers]) per unit of effective weight ([Node.EffectiveWeight]: the agent weight or the
// configured weight, scaled down during slow start), so a node of weight 2
// carries twice the tunnels of a node of weight 1, and a node in slow start
// takes a growing share. Ties are broken uniformly at random.
//
// The zero value is ready to use. A LeastConn is stateless and safe for
// concurrent use.
type LeastConn struct{}

// Pick returns the candidate with the lowest load/weight ratio, load being
// live + others, comparing load_a*weight_b with load_b*weight_a in exact
// integer arithmetic on effective weights. Among equal candidates each is chosen with equal
// probability. It reads the clock once, and only if a candidate is in slow
// start. It returns nil for an empty slice.
func (lc *LeastConn) Pick(candidates []*Node) *Node {
	var clk clock
	return lc.pick(candidates, &clk)
}

// pick is Pick with a clock shared by every pick of one acquire.
func (*LeastConn) pick(candidates []*Node, clk *clock) *Node {
	var best *Node
	var bestLive, bestWeight uint64
	ties := 0
	for _, n := range candidates {
		live, weight := n.load(), n.pickWeight(clk)
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
