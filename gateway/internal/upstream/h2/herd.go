package h2

import (
	"context"
	"errors"
	"time"

	"github.com/wsgate/wsgate/internal/wake"
)

// When a node connection carrying thousands of streams is lost, ending
// them all at once gives every client its close 1012 in the same
// instant, and every client reconnects in the same instant: a herd on the
// gateway's admission, the auth plugins and the nodes. A Set spreads
// those ends over its lost window instead, as a drain spreads its 1001s
// (Set.SetLost), unless the node is gone for good: then each client is
// told at once, so that it goes elsewhere without waiting for nothing.
// The node is taken for gone for good when the set, right after the loss,
// has no connection to it that takes a stream and cannot open one within
// the connect timeout.
//
// Until its turn a stream of a lost connection holds nothing it did not
// hold before: what the node sent before the loss is read (its END_STREAM
// included), what its client writes is dropped (the node is gone; nothing
// is queued), and the WINDOW_UPDATEs and the END_STREAM or RST_STREAM its
// reader and its close would send go to the dead connection's queue (a
// few frames a stream). A stream its tunnel closes meanwhile (the client
// left or closed) ends at once.

// errHeld is reserve's answer for a stream of a lost connection: the
// bytes are dropped (see Write).
var errHeld = errors.New("h2: connection lost, the stream's end put off")

// holdLostLocked marks the streams whose end the set puts off, when the
// connection is lost with err, and returns them: the open WebSockets
// (answered 2xx, not closed by their reader) of a connection a Set with a
// lost window dialed. Called by fail with c.mu held; the others end now.
func (c *Conn) holdLostLocked(err error) []*Stream {
	if c.set == nil || c.set.lostWindow() <= 0 {
		return nil
	}
	var held []*Stream
	for _, s := range c.streams {
		if s.core.Ended || s.core.Err != nil || s.core.ReadClosed || !s.didRespond || !s.ok() || s.respHeader != nil {
			continue // not (yet) a tunnel's: it ends now
		}
		s.held = err
		// A write waiting for window gives up and drops its bytes.
		c.send.Unwait(s.writer())
		wake.Signal(s.wwake)
		if s.wantWrite {
			s.wantWrite = false
			s.notify()
		}
		held = append(held, s)
	}
	return held
}

// heldNow reports whether the stream's end is put off (see herd.go).
func (s *Stream) heldNow() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.held != nil && s.core.Err == nil
}

// endHeld ends a stream whose end was put off, with the connection's
// loss, unless it has ended since.
func (s *Stream) endHeld() {
	s.c.mu.Lock()
	if s.core.Err == nil {
		s.finishLocked(s.held)
	}
	s.c.mu.Unlock()
}

// lostPolicy is how a Set ends the streams of a lost connection.
type lostPolicy struct {
	window, connect time.Duration
}

// SetLost has the streams of a connection the set loses from now on end
// spread evenly over window (0: at once), unless no connection to the
// node can be opened within connect (see herd.go).
func (s *Set) SetLost(window, connect time.Duration) {
	s.mu.Lock()
	s.lostPol = lostPolicy{window, connect}
	s.lostWin.Store(int64(window))
	s.mu.Unlock()
}

// lostWindow is SetLost's window. It takes no lock: Conn.fail asks with
// the connection's held, which comes after the set's (see pick).
func (s *Set) lostWindow() time.Duration { return time.Duration(s.lostWin.Load()) }

// lost takes the streams held when one of the set's connections was
// lost, and ends them: spread over the lost window, or at once when the
// node is gone for good. It returns at once.
func (s *Set) lost(held []*Stream) {
	s.held.Add(int64(len(held)))
	go s.endSpread(held)
}

func (s *Set) endSpread(held []*Stream) {
	s.mu.Lock()
	pol := s.lostPol
	s.mu.Unlock()
	window := pol.window
	if s.nodeGone(pol.connect) {
		window = 0
	}
	start := time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i, st := range held {
		if d := time.Until(start.Add(window * time.Duration(i) / time.Duration(len(held)))); d > 0 {
			timer.Reset(d)
			<-timer.C
		}
		st.endHeld()
		s.held.Add(-1)
	}
}

// nodeGone reports whether the set has no connection to the node that
// takes a stream and cannot open one within connect (2s when 0). A set
// closed meanwhile says nothing of the node: the drain that closed it
// tells the clients; nor does one backed off for a flood.
func (s *Set) nodeGone(connect time.Duration) bool {
	if connect <= 0 {
		connect = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), connect)
	defer cancel()
	_, err := s.pick(ctx)
	// A node backed off for a flood (backoff.go) is not dialed, and
	// not known gone either: its clients' ends are spread as usual.
	return err != nil && !errors.Is(err, ErrSetClosed) && !errors.Is(err, ErrBackoff)
}
