package tunnel

import (
	"sync/atomic"
	"unsafe"
)

// Counters are the running totals of frames and bytes forwarded by a set
// of tunnels (one gateway's), counted as they forward: reading them costs
// the same whatever the number of tunnels, live or ended, and takes no
// lock. A tunnel counts into one of a few stripes, each on its own cache
// line, so that pollers forwarding at once seldom share one. The zero
// value is ready to use; it must not be copied once used.
type Counters struct {
	_       [64]byte // off the cache line of whatever precedes Counters
	stripes [counterStripes]counterStripe
}

// counterStripes is how many stripes Counters has.
const counterStripes = 8

// counterStripe is one stripe of Counters: frames and bytes by direction
// (0 client to node, 1 node to client), padded to two cache lines: Go
// aligns it to 8 bytes only, so its 32 counted bytes may straddle a line,
// and 96 bytes of padding keep any line they touch clear of the next
// stripe's and of what follows Counters.
type counterStripe struct {
	dir [2]struct{ frames, bytes atomic.Uint64 }
	_   [128 - 32]byte
}

// stripeFor is the stripe the tunnel at t counts into, picked from its
// address, which spreads tunnels over the stripes without a field.
func (c *Counters) stripeFor(t *Tunnel) *counterStripe {
	return &c.stripes[(uintptr(unsafe.Pointer(t))>>9)%counterStripes]
}

// Totals sums the stripes: frames and bytes forwarded so far, in the
// Stats fields for them.
func (c *Counters) Totals() Stats {
	var s Stats
	for i := range c.stripes {
		d := &c.stripes[i].dir
		s.FramesToNode += d[0].frames.Load()
		s.BytesToNode += d[0].bytes.Load()
		s.FramesToClient += d[1].frames.Load()
		s.BytesToClient += d[1].bytes.Load()
	}
	return s
}

// countBytes adds n bytes read by h to the tunnel's stripe, if it counts.
func (h *half) countBytes(n uint64) {
	if st := h.t.count; st != nil {
		st.dir[h.dirIndex()].bytes.Add(n)
	}
}

// countFrames adds n frames forwarded by h to the tunnel's stripe, if it
// counts.
func (h *half) countFrames(n uint64) {
	if st := h.t.count; st != nil && n > 0 {
		st.dir[h.dirIndex()].frames.Add(n)
	}
}

// dirIndex is h's direction in a counterStripe.
func (h *half) dirIndex() int {
	if h.toClient {
		return 1
	}
	return 0
}
