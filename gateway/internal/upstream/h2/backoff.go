package h2

import (
	"errors"
	"fmt"
	"time"

	"github.com/wsgate/wsgate/internal/penalty"
	"golang.org/x/net/http2"
)

// A node whose connection this side cut for flooding (control frames
// beyond their bound, answers it does not read, a header block far over
// its bound: GOAWAY(ENHANCE_YOUR_CALM)) is not dialed again at once: its
// clients would come back, the set would dial it, and the node would
// flood the new connection, a TLS handshake and a cut each time. The set
// backs off instead, as the gateway refuses a client address cut for
// flooding (see internal/penalty): no dial for SetFloodBackoff's First
// after a first cut, twice as long after each cut in a row. Meanwhile
// Open takes a connection of the set's still open if one has room, and
// otherwise fails at once with ErrBackoff, so the node's clients go to
// another node, or get the answer of a pool with no node.

// ErrBackoff is returned by Set.Open, at once, while the set does not
// dial the node: one of its connections was cut for flooding lately (see
// SetFloodBackoff), and none of those open takes the stream.
var ErrBackoff = errors.New("h2: the node flooded a connection lately and is not dialed again yet")

// SetFloodBackoff sets how long the set does not dial the node after one
// of its connections was cut for flooding (First, doubling with each cut
// in a row up to Max; off when First is 0, the zero value). A back-off
// under way keeps its end; the next cut is judged by p.
func (s *Set) SetFloodBackoff(p penalty.Policy) {
	s.mu.Lock()
	s.floodPol = p
	s.mu.Unlock()
}

// Backoff is how long the set still does not dial the node (0: it
// dials as usual).
func (s *Set) Backoff() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flood.Left(time.Now())
}

// backoffLocked is the error that stops a dial at now, nil when the set
// may dial. Called with s.mu held.
func (s *Set) backoffLocked(now time.Time) error {
	if left := s.flood.Left(now); left > 0 {
		return fmt.Errorf("%w (%v left)", ErrBackoff, left.Round(time.Millisecond))
	}
	return nil
}

// noteEnd notes why one of the set's connections ended (Conn.fail, once
// a connection, before its streams' ends are spread and so before any
// dial that replaces it): a cut for flooding backs the set off.
func (s *Set) noteEnd(err error) {
	if !cutForFlood(err) {
		return
	}
	s.mu.Lock()
	s.flood.Cut(time.Now(), s.floodPol)
	s.floodCuts++
	s.mu.Unlock()
}

// cutForFlood reports whether err, a connection's end (Conn.Err), is a
// cut of this side's for flooding.
func cutForFlood(err error) bool {
	var lost *connLostError
	if errors.As(err, &lost) {
		err = lost.cause
	}
	var ce connError
	return errors.As(err, &ce) && ce.Code == http2.ErrCodeEnhanceYourCalm
}
