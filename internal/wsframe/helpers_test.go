package wsframe

import (
	"bytes"
	"fmt"
	"math/rand/v2"
)

// frame returns a whole frame: h's header followed by payload, masked with
// h.Mask when h.Masked. h.Length is set from payload.
func frame(h Header, payload []byte) []byte {
	h.Length = uint64(len(payload))
	b := AppendHeader(nil, h)
	start := len(b)
	b = append(b, payload...)
	if h.Masked {
		Mask(h.Mask, 0, b[start:])
	}
	return b
}

// concat joins frames into one stream.
func concat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

// event is what a Scanner reports at the end of one frame.
type event struct {
	Off       int // stream offset just past the frame
	H         Header
	CloseCode uint16
	InMessage bool
}

func (e event) String() string {
	return fmt.Sprintf("@%d %v fin=%v len=%d close=%d inMsg=%v", e.Off, e.H.Op, e.H.Fin, e.H.Length, e.CloseCode, e.InMessage)
}

// result is everything a Scanner reports over a whole stream.
type result struct {
	Events   []event
	Consumed int   // bytes consumed before stopping
	Err      error // sticky error, if any
	Boundary bool  // AtBoundary at the end
}

// scan feeds stream to a fresh copy of cfg in chunks of the sizes next
// returns (each clamped to at least 1), checking Advance's contract on every
// call. It panics on a contract violation so that fuzz targets and tests
// share it.
func scan(cfg Scanner, stream []byte, next func() int) result {
	s := cfg
	var r result
	off := 0
	// Each iteration consumes at least one byte or stops, so the loop is
	// bounded by len(stream)+1 iterations.
	for i := 0; i <= len(stream); i++ {
		if off == len(stream) {
			break
		}
		size := max(next(), 1)
		end := min(off+size, len(stream))
		p := stream[off:end]
		n, ended, err := s.Advance(p)
		if n < 0 || n > len(p) {
			panic(fmt.Sprintf("Advance consumed %d of %d bytes", n, len(p)))
		}
		off += n
		if err != nil {
			if ended {
				panic("Advance reported end with an error")
			}
			r.Err = err
			if n2, e2, err2 := s.Advance(stream[off:]); n2 != 0 || e2 || err2 != err {
				panic(fmt.Sprintf("error not sticky: %d %v %v", n2, e2, err2))
			}
			break
		}
		if n == 0 {
			panic("Advance consumed nothing without an error")
		}
		if ended {
			if !s.AtBoundary() {
				panic("frame ended but scanner is not at a boundary")
			}
			r.Events = append(r.Events, event{Off: off, H: s.Header(), CloseCode: s.CloseCode(), InMessage: s.InMessage()})
		} else if n < len(p) {
			panic(fmt.Sprintf("Advance stopped at %d of %d bytes without ending a frame", n, len(p)))
		}
	}
	r.Consumed = off
	r.Boundary = s.AtBoundary()
	return r
}

// whole feeds the stream in one piece at a time (Advance still stops at each
// frame end).
func whole() int { return 1 << 30 }

// bytewise feeds the stream one byte at a time.
func bytewise() int { return 1 }

// randomChunks returns a chunk-size source drawing sizes in [1, maxSize].
func randomChunks(rng *rand.Rand, maxSize int) func() int {
	return func() int { return 1 + rng.IntN(maxSize) }
}
