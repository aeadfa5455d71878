package balancer

import "time"

// WeightScale is the unit of [Node.EffectiveWeight]: a node outside slow
// start has an effective weight of its weight times WeightScale, so a ramp
// can give a node of weight 1 a fraction of its share in integer
// arithmetic.
const WeightScale = 1000

// MaxAgentWeight is the largest weight [Node.SetAgentWeight] accepts; larger
// values are clamped to it.
const MaxAgentWeight = 1000

// SlowStartFloorPercent is the lowest share of its full weight a node gets
// during slow start, in percent, so a node that has just come up takes some
// traffic at once.
const SlowStartFloorPercent = 10

// maxWeight bounds the configured weight so weight*WeightScale fits in an
// int64 with room to spare.
const maxWeight = 1 << 50

// clockNow is the clock read by pickers; tests replace it to count reads.
var clockNow = time.Now

// slowStart is one ramp: from since, over a duration. It is immutable once
// stored in a Node.
type slowStart struct {
	since time.Time
	over  time.Duration
}

// SetSlowStart starts a ramp: from since, for over, the node's effective
// weight grows linearly from [SlowStartFloorPercent] of its full weight to
// the full weight. over of 0 or less switches slow start off (full weight at
// once). A health checker calls it when a node comes back up, so a node
// that has just started is not handed every new connection of a
// least-connections pool at once.
func (n *Node) SetSlowStart(since time.Time, over time.Duration) {
	if over <= 0 {
		n.slow.Store(nil)
		return
	}
	n.slow.Store(&slowStart{since: since, over: over})
}

// EffectiveWeight returns the weight [LeastConn] gives the node at now, in
// units of 1/[WeightScale]: the agent weight if set, else the configured
// weight, times WeightScale, scaled down linearly during slow start (never
// below [SlowStartFloorPercent] of it, and never below 1). It only reads the
// node.
func (n *Node) EffectiveWeight(now time.Time) int {
	return int(n.fullWeight().ramp(n.slow.Load(), now))
}

// fullWeight is the agent weight if set, else the configured weight, in
// units of 1/WeightScale.
func (n *Node) fullWeight() scaled {
	w := n.agentWeight.Load()
	if w <= 0 {
		w = n.weight.Load()
	}
	return scaled(max(w, 1) * WeightScale)
}

// pickWeight is EffectiveWeight for a picker: it reads the clock only if
// the node is in slow start, through clk so one pick reads it at most once,
// and clears a ramp that has ended so later picks skip the clock.
func (n *Node) pickWeight(clk *clock) uint64 {
	full := n.fullWeight()
	ss := n.slow.Load()
	if ss == nil {
		return uint64(full)
	}
	now := clk.now()
	if now.Sub(ss.since) >= ss.over {
		n.slow.CompareAndSwap(ss, nil)
		return uint64(full)
	}
	return uint64(full.ramp(ss, now))
}

// scaled is a weight in units of 1/WeightScale.
type scaled int64

// ramp returns w as seen at now during ss (w itself when ss is nil or
// over).
func (w scaled) ramp(ss *slowStart, now time.Time) scaled {
	if ss == nil {
		return w
	}
	elapsed := now.Sub(ss.since)
	if elapsed >= ss.over {
		return w
	}
	floor := max(w*SlowStartFloorPercent/100, 1)
	if elapsed <= 0 {
		return floor
	}
	// float64 keeps w*elapsed from overflowing for long ramps; the result
	// is below w, which is exact in a float64.
	r := scaled(float64(w) * (float64(elapsed) / float64(ss.over)))
	return max(r, floor)
}

// clock reads clockNow at most once and remembers the answer.
type clock struct {
	t    time.Time
	read bool
}

func (c *clock) now() time.Time {
	if !c.read {
		c.t, c.read = clockNow(), true
	}
	return c.t
}
