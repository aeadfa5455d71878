package loadgen

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram buckets are log-linear over microseconds: values below 64 µs
// have a bucket each, above that every power of two is cut into 32 buckets,
// so a bucket is at most about 3% wide. 59 powers of two cover any
// time.Duration.
const (
	histSub     = 32
	histLinear  = 2 * histSub
	histBuckets = histLinear + 58*histSub
)

// Hist is a latency histogram with bounded relative error (about 3%). The
// zero value is empty and ready; Record is safe for concurrent use, and
// Merge, Percentile and JSON encoding may run alongside Record (they see
// some consistent-enough snapshot). A Hist must not be copied after first
// use.
type Hist struct {
	counts [histBuckets]atomic.Int64
	n      atomic.Int64
	sumUS  atomic.Int64
	maxUS  atomic.Int64
}

// histIndex returns the bucket of a value in microseconds.
func histIndex(us uint64) int {
	if us < histLinear {
		return int(us)
	}
	e := bits.Len64(us) - 6 // us>>e is in [32, 64)
	return histLinear + (e-1)*histSub + int(us>>e) - histSub
}

// histUpper returns the largest value in microseconds that falls in bucket
// i.
func histUpper(i int) uint64 {
	if i < histLinear {
		return uint64(i)
	}
	e := (i-histLinear)/histSub + 1
	sub := uint64((i-histLinear)%histSub + histSub)
	return (sub+1)<<e - 1
}

// Record adds one observation; negative durations count as zero.
func (h *Hist) Record(d time.Duration) {
	us := max(d.Microseconds(), 0)
	h.counts[histIndex(uint64(us))].Add(1)
	h.n.Add(1)
	h.sumUS.Add(us)
	for {
		m := h.maxUS.Load()
		if us <= m || h.maxUS.CompareAndSwap(m, us) {
			return
		}
	}
}

// Count returns the number of observations.
func (h *Hist) Count() int64 { return h.n.Load() }

// Merge adds o's observations to h.
func (h *Hist) Merge(o *Hist) {
	if o == nil {
		return
	}
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sumUS.Add(o.sumUS.Load())
	om := o.maxUS.Load()
	for {
		m := h.maxUS.Load()
		if om <= m || h.maxUS.CompareAndSwap(m, om) {
			return
		}
	}
}

// Percentile returns the value at or below which a fraction q (0..1) of the
// observations fall: the upper bound of the bucket holding it, never above
// the largest observation. It returns 0 for an empty histogram.
func (h *Hist) Percentile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen int64
	maxUS := uint64(h.maxUS.Load())
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(histUpper(i), maxUS)) * time.Microsecond
		}
	}
	return time.Duration(maxUS) * time.Microsecond
}

// Max returns the largest observation (microsecond resolution).
func (h *Hist) Max() time.Duration { return time.Duration(h.maxUS.Load()) * time.Microsecond }

// Mean returns the mean observation, 0 when empty.
func (h *Hist) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sumUS.Load()/n) * time.Microsecond
}

// histWire is the JSON form of a Hist: sparse [bucket, count] pairs, so a
// child process can hand its raw observations to the parent.
type histWire struct {
	Buckets [][2]int64 `json:"buckets"`
	SumUS   int64      `json:"sum_us"`
	MaxUS   int64      `json:"max_us"`
}

// MarshalJSON encodes the non-empty buckets.
func (h *Hist) MarshalJSON() ([]byte, error) {
	w := histWire{Buckets: [][2]int64{}, SumUS: h.sumUS.Load(), MaxUS: h.maxUS.Load()}
	for i := range h.counts {
		if c := h.counts[i].Load(); c != 0 {
			w.Buckets = append(w.Buckets, [2]int64{int64(i), c})
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON adds the encoded buckets to h, which should be empty.
func (h *Hist) UnmarshalJSON(b []byte) error {
	var w histWire
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("decode histogram: %w", err)
	}
	for _, bc := range w.Buckets {
		if bc[0] < 0 || bc[0] >= histBuckets || bc[1] < 0 {
			return fmt.Errorf("decode histogram: bucket %d count %d out of range", bc[0], bc[1])
		}
		h.counts[bc[0]].Add(bc[1])
		h.n.Add(bc[1])
	}
	h.sumUS.Add(w.SumUS)
	if w.MaxUS > h.maxUS.Load() {
		h.maxUS.Store(w.MaxUS)
	}
	return nil
}
