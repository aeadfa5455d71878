package h2

import (
	"encoding/binary"
	"net"

	"golang.org/x/net/http2"
)

// The non-blocking side of a Stream, for an event loop that runs many
// streams on one goroutine (the tunnel package's pollers): Notify says when
// to look, ReadNB and WriteNB never wait, and what they queue (DATA,
// WINDOW_UPDATE) goes to the network at the loop's Kick, once per
// connection for all the streams it served in one pass, rather than one
// write per stream.

// Notify sets fn, called each time the stream may have become readable
// (bytes or the node's END_STREAM arrived, the stream ended) or, after a
// WriteNB that took less than it was given, writable again (a send window
// grew). fn runs with the connection's lock held, on whatever goroutine
// saw the change (the event loop's own included): it must return at once
// and must not call the stream. Bytes that arrived before Notify are not
// announced: read once after setting it.
func (s *Stream) Notify(fn func()) {
	s.c.mu.Lock()
	s.notify = fn
	s.c.mu.Unlock()
}

// ReadNB is Read without waiting: it returns 0 and no error when nothing
// is buffered and the stream is open. The window it consumes is given back
// as Read's is, by a WINDOW_UPDATE queued for the next Kick.
func (s *Stream) ReadNB(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	n, inc, err, _ := s.readLocked(p)
	c.mu.Unlock()
	if inc > 0 {
		c.queueFrames(s.windowUpdate(inc))
	}
	return n, err
}

// WriteNB queues as much of bufs, in order, as DATA frames as the stream's
// and the connection's send windows allow now (Write's rules,
// Config.StreamSendLimit included), for the next Kick to write, and
// returns how many bytes it took. When that is less than it was given,
// Notify's fn is called once a window grows. Its errors are Write's.
func (s *Stream) WriteNB(bufs [][]byte) (int, error) {
	c := s.c
	want := 0
	for _, b := range bufs {
		want += len(b)
	}
	if s.heldNow() {
		return want, nil // see herd.go
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if err := c.q.ErrLocked(); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Woken to take the connection's window, it passes what is left on
	// (deferred calls run last first: before the unlock).
	defer c.send.Pass()
	c.send.Unwait(s.writer())
	switch {
	case s.core.Err != nil:
		return 0, s.core.Err
	case s.core.LocalEnded || s.core.Ended:
		return 0, net.ErrClosed
	case s.held != nil:
		return want, nil // lost meanwhile: see herd.go
	}
	taken, seg, off := 0, 0, 0 // bufs[seg][off:] is next
	for taken < want {
		n := c.send.Take(s.writer(), want-taken, int(c.peerFrame))
		if n == 0 {
			s.waitLocked()
			s.wantWrite = s.notify != nil
			break
		}
		// One DATA frame of n bytes gathered from bufs (RFC 9113
		// section 6.1), appended to the queue as the Framer would.
		var head [frameHeaderLen]byte
		binary.BigEndian.PutUint32(head[:4], uint32(n)<<8|uint32(http2.FrameData))
		// head[4], the flags, is 0: END_STREAM goes by CloseWrite.
		binary.BigEndian.PutUint32(head[5:], s.id)
		c.q.AppendLocked(head[:]...)
		taken += n
		for n > 0 {
			b := bufs[seg][off:]
			k := min(n, len(b))
			c.q.AppendLocked(b[:k]...)
			n -= k
			if off += k; off == len(bufs[seg]) {
				seg, off = seg+1, 0
			}
		}
	}
	return taken, nil
}

// Kick has the connection's flusher write what the stream's ReadNB and
// WriteNB queued (and whatever else is queued on its connection). It
// never blocks.
func (s *Stream) Kick() { s.c.Kick() }
