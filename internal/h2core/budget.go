package h2core

import (
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/net/http2"
)

// ControlBudget bounds the frames a peer sends that do no work (PING,
// SETTINGS, and for a role that counts them, resets, WINDOW_UPDATEs,
// PRIORITY, empty DATA): each costs the reader a pass and often an
// answer. It is a token bucket of Burst tokens refilled Rate a second;
// a frame that does work may Earn one back, and the frames this side's
// own sending calls for (the WINDOW_UPDATEs its DATA makes the peer
// send) are Owed, free. A peer past it is flooding and is cut
// (ENHANCE_YOUR_CALM).
//
// It is not safe for concurrent use: the role calls it from its reader,
// or under the lock it names.
type ControlBudget struct {
	burst, rate int
	tokens      int
	owed        int64
	at          time.Time // when tokens were last refilled
}

// NewControlBudget returns a full budget of burst tokens (at least 1)
// refilled rate a second from now.
func NewControlBudget(burst, rate int, now time.Time) ControlBudget {
	burst = max(burst, 1)
	return ControlBudget{burst: burst, rate: rate, tokens: burst, at: now}
}

// Spend charges one frame at now. It returns the ConnError
// (ENHANCE_YOUR_CALM) that cuts the peer once the budget is spent.
func (b *ControlBudget) Spend(now time.Time) error {
	if b.owed > 0 {
		b.owed--
		return nil
	}
	if b.tokens <= 0 {
		// Refilled only when spent, by the whole tokens since the last
		// refill (the burst at most).
		if refill := min(now.Sub(b.at).Seconds()*float64(b.rate), float64(b.burst)); refill >= 1 {
			b.at = now
			b.tokens = min(b.tokens+int(refill), b.burst)
		}
		if b.tokens <= 0 {
			return ConnError{http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("control frames beyond their budget (%d at once, %d a second)", b.burst, b.rate)}
		}
	}
	b.tokens--
	return nil
}

// Earn credits n tokens for frames that did work, within the burst.
func (b *ControlBudget) Earn(n int) {
	b.tokens = min(b.tokens+n, b.burst)
}

// Owe makes the next n frames free: this side's own sending calls for
// them (two WINDOW_UPDATEs for each DATA frame it sends).
func (b *ControlBudget) Owe(n int64) {
	b.owed += n
}

// ErrHeaderFlood is what a ReadBudget returns once one ReadFrame has
// read past its limit.
var ErrHeaderFlood = errors.New("http2: one header block read past its budget")

// ReadLimit is the most one ReadFrame may read for a connection that
// bounds decoded header blocks to maxHeader: a header block's HEADERS and
// CONTINUATION frames at four times maxHeader (hpack encodes a field in
// little more than its size, and the Framer reads on to about twice the
// limit before it answers a block over it), plus two frames of
// frameSize with their headers; any other frame is one frame.
func ReadLimit(maxHeader, frameSize uint32) int {
	return 4*int(maxHeader) + 2*(int(frameSize)+9)
}

// ReadBudget is a connection's reader as its Framer reads it: it fails
// with ErrHeaderFlood once the bytes read since the last Reset (before
// each ReadFrame) pass Limit. The Framer reads a header block's
// CONTINUATION frames within one ReadFrame and bounds the fields they
// decode to, not the frames: a block of hpack table size updates, which
// decode to nothing, would otherwise be read for as long as the peer
// sends it (a CONTINUATION flood, CVE-2024-27316's kind). It belongs to
// the connection's one reader.
type ReadBudget struct {
	// R is the connection's reader.
	R io.Reader
	// Limit is the most one ReadFrame may read (see ReadLimit).
	Limit int
	n     int
}

// Reset starts the budget of the next ReadFrame.
func (b *ReadBudget) Reset() { b.n = 0 }

// Read reads from R within what is left of the budget.
func (b *ReadBudget) Read(p []byte) (int, error) {
	if b.n >= b.Limit {
		return 0, ErrHeaderFlood
	}
	if len(p) > b.Limit-b.n {
		p = p[:b.Limit-b.n]
	}
	n, err := b.R.Read(p)
	b.n += n
	return n, err
}
