package h2core

import (
	"io"
	"net"

	"golang.org/x/net/http2"
)

// KeepBufCap is the largest receive buffer a stream keeps once read
// empty; a larger one is dropped, so that an idle stream holds little.
const KeepBufCap = 1024

// Recv is the receive half of a stream (RFC 9113 sections 5.2 and 6.9):
// what was received and not yet read, the receive window the peer may
// still send into, the consumed bytes not yet given back to it, and what
// the request's content-length still announces.
type Recv struct {
	buf []byte // received, not yet read: buf[off:]
	off int
	// size is the window this side advertised for the stream
	// (SETTINGS_INITIAL_WINDOW_SIZE); credit is given back in updates of
	// half of it.
	size   uint32
	window int32  // what the peer may still send
	credit uint32 // consumed bytes not yet given back by WINDOW_UPDATE
	// bodyLeft is what the content-length still announces, -1 without
	// one: DATA beyond it, or END_STREAM short of it, is malformed
	// (section 8.1.1).
	bodyLeft int64
	// release drops the buffer each time it is read empty, whatever its
	// size (see Release).
	release bool
}

// Init readies r for a stream whose advertised receive window is window
// and whose content-length is bodyLen (-1: none, or not checked).
func (r *Recv) Init(window uint32, bodyLen int64) {
	r.size = window
	r.window = int32(window)
	r.bodyLeft = bodyLen
}

// Release has r drop its buffer each time it is read empty, so that a
// stream read by an event loop, or through internal/pollread, holds none
// while it is idle.
func (r *Recv) Release() { r.release = true }

// Buffered is how many bytes were received and not yet read.
func (r *Recv) Buffered() int { return len(r.buf) - r.off }

// BufCap is the capacity of the receive buffer held (0: none).
func (r *Recv) BufCap() int { return cap(r.buf) }

// BodyLeft is what the content-length still announces, -1 without one.
func (r *Recv) BodyLeft() int64 { return r.bodyLeft }

// takeCredit returns the consumed bytes to give back to the peer by
// WINDOW_UPDATE, which opens the window again by as much.
func (r *Recv) takeCredit() uint32 {
	inc := r.credit
	r.window += int32(inc)
	r.credit = 0
	return inc
}

// CheckData returns the stream error a DATA frame of length n (padding
// included, RFC 9113 section 6.1) carrying size bytes of data, ending the
// stream or not, calls for, or 0 when the stream takes it. It changes
// nothing. DATA beyond the stream's receive window is FLOW_CONTROL_ERROR
// as a stream error (section 6.9.1 leaves the choice), so that one
// stream's excess costs the connection's others nothing; DATA after the
// peer's END_STREAM is STREAM_CLOSED (section 5.1, "half-closed
// (remote)"); DATA that does not add up to the content-length is
// PROTOCOL_ERROR (section 8.1.1).
func (s *Stream) CheckData(n uint32, size int, end bool) http2.ErrCode {
	switch {
	case int64(n) > int64(s.window):
		return http2.ErrCodeFlowControl
	case s.RemoteEnded:
		return http2.ErrCodeStreamClosed
	case s.bodyLeft >= 0 && (int64(size) > s.bodyLeft || end && int64(size) != s.bodyLeft):
		return http2.ErrCodeProtocol
	}
	return 0
}

// TakeData takes a DATA frame CheckData accepted: its length n comes off
// the receive window, its padding is consumed at once, and its data is
// buffered for Read, or discarded with its window given back when discard
// is set or nobody reads any more (ReadClosed). With end the peer ended
// its side. It returns how many bytes it buffered (the holder wakes its
// reader when that is more than 0 or end is set) and the window to give
// back now by WINDOW_UPDATE: consumed bytes go back in updates of half a
// window.
func (s *Stream) TakeData(n uint32, data []byte, end, discard bool) (buffered int, inc uint32) {
	if s.bodyLeft >= 0 {
		s.bodyLeft -= int64(len(data))
	}
	s.window -= int32(n)
	s.credit += n - uint32(len(data)) // padding is consumed on arrival
	if discard || s.ReadClosed {
		s.credit += uint32(len(data))
	} else if len(data) > 0 {
		if s.off > 0 && len(s.buf)+len(data) > cap(s.buf) {
			// Move the unread part to the front rather than grow: what
			// a stream holds stays within its window however its
			// reader keeps pace.
			m := copy(s.buf, s.buf[s.off:])
			s.buf, s.off = s.buf[:m], 0
		}
		s.buf = append(s.buf, data...)
		buffered = len(data)
	}
	if end {
		s.RemoteEnded = true
	} else if s.credit >= s.size/2 {
		inc = s.takeCredit()
	}
	return buffered, inc
}

// Readable reports whether a Read would not wait: bytes are buffered,
// the peer ended its side, the stream failed, or nobody reads any more.
func (s *Stream) Readable() bool {
	return s.ReadClosed || s.Err != nil || s.off < len(s.buf) || s.RemoteEnded
}

// Read reads what is buffered into p, or returns why a Read ends:
// net.ErrClosed once nobody reads (ReadClosed), io.EOF once the peer
// ended its side, else the stream's error. What came before an error is
// read first, and after the peer's END_STREAM the end is io.EOF whatever
// ended the stream after it: a reset of a stream whose peer had ended
// loses nothing (RFC 9113 section 8.1 lets a server stop a request it
// has answered; HAProxy resets a stream microseconds after its
// END_STREAM). ready is false, with nothing read, when a Read would wait.
// inc is the window to give back now by WINDOW_UPDATE.
func (s *Stream) Read(p []byte) (n int, inc uint32, err error, ready bool) {
	switch {
	case s.ReadClosed:
		return 0, 0, net.ErrClosed, true
	case s.off < len(s.buf):
		n = copy(p, s.buf[s.off:])
		s.off += n
		if s.off == len(s.buf) {
			s.off = 0
			s.buf = s.buf[:0]
			if cap(s.buf) > KeepBufCap || s.release {
				s.buf = nil
			}
		}
		// The reader consumed n bytes: the peer may send them again
		// (section 6.9), in updates of half a window.
		if !s.RemoteEnded && !s.Ended {
			s.credit += uint32(n)
			if s.credit >= s.size/2 {
				inc = s.takeCredit()
			}
		}
		return n, inc, nil, true
	case s.RemoteEnded:
		return 0, 0, io.EOF, true
	case s.Err != nil:
		return 0, 0, s.Err, true
	}
	return 0, 0, nil, false
}

// CloseRead stops reading: what is buffered is dropped (dropped bytes)
// and, unless the peer has ended its side or the stream has ended, its
// window given back (inc, to send by WINDOW_UPDATE), as what arrives from
// now on will be (TakeData). first is false when nobody read already.
func (s *Stream) CloseRead() (dropped int, inc uint32, first bool) {
	first = !s.ReadClosed
	s.ReadClosed = true
	dropped = len(s.buf) - s.off
	s.buf, s.off = nil, 0
	if !s.RemoteEnded && !s.Ended {
		s.credit += uint32(dropped)
		if s.credit > 0 {
			inc = s.takeCredit()
		}
	}
	return dropped, inc, first
}

// ConnRecv is a connection's receive window (RFC 9113 section 6.9). What
// DATA takes of it is owed back at once, whatever its stream does with
// the data (buffers, discards, or resets the stream), since each stream's
// own window bounds what it holds: a stream whose reader stopped never
// holds the connection. It goes back in updates of half the window.
type ConnRecv struct {
	size   uint32 // the window this side advertised
	window int64  // what the peer may still send
	credit uint32 // received bytes not yet given back
}

// Init readies c for a connection whose advertised receive window is
// size.
func (c *ConnRecv) Init(size uint32) {
	c.size = size
	c.window = int64(size)
}

// Take counts a DATA frame of length n (padding included) against the
// window, and reports false, taking nothing, when it goes beyond it: a
// connection FLOW_CONTROL_ERROR (section 6.9.1), on a closed stream too.
func (c *ConnRecv) Take(n uint32) bool {
	if int64(n) > c.window {
		return false
	}
	c.window -= int64(n)
	c.credit += n
	return true
}

// Credit returns the connection WINDOW_UPDATE to send now: what is owed
// once it reaches half the window, else 0.
func (c *ConnRecv) Credit() uint32 {
	if c.credit < c.size/2 {
		return 0
	}
	inc := c.credit
	c.window += int64(inc)
	c.credit = 0
	return inc
}
