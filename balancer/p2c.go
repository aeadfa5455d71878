package balancer

import "math/rand/v2"

// P2C is the power of two choices: each pick draws two distinct candidates
// at random, each with probability proportional to its effective weight
// ([Node.EffectiveWeight]: agent or configured weight, ramped during slow
// start), and keeps the one with fewer live leases (plus the other
// gateways' count, see [Node.SetOthers]) per unit of weight (the first
// drawn on a tie). It reads every candidate's weight but compares only
// two live counts, so a burst of concurrent picks spreads over the pool
// instead of all landing on the one least-loaded node, and a node of weight
// 2 is drawn twice as often as a node of weight 1.
//
// The zero value is ready to use. A P2C holds no state of its own (it
// draws from math/rand/v2's per-thread generator) and is safe for
// concurrent use.
type P2C struct {
	// rand, if set, replaces rand.Uint64; tests set it to a seeded
	// generator, which then makes the P2C unsafe for concurrent use.
	rand func() uint64
}

// Pick returns one of two weighted draws from candidates, the one with the
// lower live/weight ratio. It returns the only candidate of a one-element
// slice and nil for an empty one.
func (p *P2C) Pick(candidates []*Node) *Node {
	var clk clock
	return p.pick(candidates, &clk)
}

// pick is Pick with a clock shared by every pick of one acquire.
func (p *P2C) pick(candidates []*Node, clk *clock) *Node {
	switch len(candidates) {
	case 0:
		return nil
	case 1:
		return candidates[0]
	}
	var buf [stackCandidates]uint64
	ws := buf[:0]
	if len(candidates) > len(buf) {
		ws = make([]uint64, 0, len(candidates))
	}
	var total uint64
	for _, n := range candidates {
		w := min(n.pickWeight(clk), maxDrawWeight)
		ws = append(ws, w)
		total += w
	}
	a := weightedIndex(ws, total, -1, p.uint64())
	b := weightedIndex(ws, total-ws[a], a, p.uint64())
	na, nb := candidates[a], candidates[b]
	if cmpRatio(nb.load(), ws[b], na.load(), ws[a]) < 0 {
		return nb
	}
	return na
}

// uint64 returns a random number from the test generator if set, else from
// math/rand/v2.
func (p *P2C) uint64() uint64 {
	if p.rand != nil {
		return p.rand()
	}
	return rand.Uint64()
}

// maxDrawWeight bounds each effective weight in a draw, so the sum over
// 2^24 nodes fits in a uint64 with a small modulo bias; only weights
// above 2^40 / [WeightScale] (about 1.1e9) are cut by it.
const maxDrawWeight = 1 << 40

// weightedIndex returns the index into ws that r lands on when the weights
// (skipping index skip) are laid end to end over [0, total): index i with
// probability ws[i]/total. total must be the sum of the weights not skipped
// and above 0; every weight is at least 1, so it is.
func weightedIndex(ws []uint64, total uint64, skip int, r uint64) int {
	r %= total // modulo bias below total/2^64 (see maxDrawWeight)
	last := -1
	for i, w := range ws {
		if i == skip {
			continue
		}
		if r < w {
			return i
		}
		r -= w
		last = i
	}
	return last
}

var _ Picker = (*P2C)(nil)
