package h2core

import (
	"container/heap"
	"container/list"
)

const (
	// DefaultWindow is the initial flow-control window of a connection
	// and of every stream (RFC 9113 section 6.9.2).
	DefaultWindow = 65535
	// MaxWindow is the largest flow-control window (RFC 9113 section
	// 6.9.1).
	MaxWindow = 1<<31 - 1
)

// Send is a stream's send window (RFC 9113 section 6.9) and its place
// among the writers its connection's ConnSend wakes.
type Send struct {
	// delta is the stream's send window less the peer's
	// SETTINGS_INITIAL_WINDOW_SIZE: the WINDOW_UPDATEs received less the
	// DATA sent, so that a change of the setting applies to every stream
	// (section 6.9.2) without visiting them.
	delta int64
	// uncredited is the DATA sent that the peer has not credited back
	// to the stream (ConnSend.ShareLimit).
	uncredited int64
	// connAt: a writer waits for the connection's window, at connAt in
	// ConnSend.conn. heapAt: it waits for window of its own, at index
	// heapAt-1 of ConnSend.own (0: it does not). sharing: it waits at
	// ConnSend.ShareLimit while others wait for the connection's window.
	connAt  *list.Element
	heapAt  int
	sharing bool
}

// Writer is a stream as its connection's ConnSend sees it: its send
// window, and the wake-up of a writer that waits for some.
type Writer interface {
	comparable
	// SendHalf returns the stream's send window.
	SendHalf() *Send
	// WakeWrite wakes the stream's writer: a window it waits for grew.
	WakeWrite()
}

// ConnSend is a connection's send window, the peer's
// SETTINGS_INITIAL_WINDOW_SIZE its streams' windows follow, and the
// streams whose writers wait for window. A WINDOW_UPDATE of the
// connection wakes one writer, not all: each woken takes what it needs
// and passes on what is left (Pass), so that it costs one wake-up however
// many wait; a larger SETTINGS_INITIAL_WINDOW_SIZE wakes the writers it
// opens, and no others. Its holder guards it with the connection's lock
// and readies it with Init.
type ConnSend[W Writer] struct {
	window     int64 // the connection's send window
	peerWindow int32 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	// deltaBound is at least the largest delta of an open stream: while
	// peerWindow plus it stays within MaxWindow no stream can overflow,
	// and a change of the setting is checked without a walk.
	deltaBound int64
	// conn are the writers waiting for the connection's window, in the
	// order they came; own those waiting for window of their own, the
	// largest delta first; share those held at ShareLimit.
	conn  list.List
	own   waitHeap[W]
	share map[W]struct{}
	// credited counts the bytes the peer gave back to the connection's
	// window.
	credited uint64
	// ShareLimit, when not 0, bounds what one stream may have sent that
	// the peer has not credited back to it while another stream waits
	// for the connection's window: a peer that gives the connection's
	// window back only as each stream's reader consumes would otherwise
	// let one stream whose reader stopped take all of it. A stream alone
	// may go past it (a peer may credit a stream only once half its
	// window is spent, which a hard limit would never reach).
	ShareLimit int64
}

// Init readies c with the initial windows (section 6.9.2).
func (c *ConnSend[W]) Init() {
	c.window = DefaultWindow
	c.peerWindow = DefaultWindow
	c.share = make(map[W]struct{})
}

// Window is the connection's send window.
func (c *ConnSend[W]) Window() int64 { return c.window }

// Credited is how many bytes the peer gave back to the connection's
// window so far.
func (c *ConnSend[W]) Credited() uint64 { return c.credited }

// StreamWindow is what stream w may still send; a change of the peer's
// SETTINGS_INITIAL_WINDOW_SIZE may have made it negative.
func (c *ConnSend[W]) StreamWindow(w W) int64 { return int64(c.peerWindow) + w.SendHalf().delta }

// Uncredited is what stream w sent that the peer has not credited back
// to it.
func (c *ConnSend[W]) Uncredited(w W) int64 { return w.SendHalf().uncredited }

// ConnWaiters is how many writers wait for the connection's window.
func (c *ConnSend[W]) ConnWaiters() int { return c.conn.Len() }

// WaitsForConn reports whether w's writer waits for the connection's
// window.
func (c *ConnSend[W]) WaitsForConn(w W) bool { return w.SendHalf().connAt != nil }

// Take takes up to want bytes, at most frame, of send window from stream
// w and the connection, and returns how many; 0 when there is none to
// take (then Wait).
func (c *ConnSend[W]) Take(w W, want, frame int) int {
	s := w.SendHalf()
	n := min(int64(want), c.StreamWindow(w), c.window, int64(frame))
	if c.ShareLimit > 0 {
		share := c.ShareLimit - s.uncredited
		if share <= 0 && c.conn.Len() == 0 {
			share = MaxWindow // alone, it may use what the peer gives
		}
		n = min(n, share)
	}
	if n <= 0 {
		return 0
	}
	s.delta -= n
	c.window -= n
	s.uncredited += n
	return int(n)
}

// GiveBack returns n bytes Take took that will not be sent (the stream
// ended meanwhile), and passes the connection's window on.
func (c *ConnSend[W]) GiveBack(w W, n int) {
	s := w.SendHalf()
	s.delta += int64(n)
	c.window += int64(n)
	s.uncredited -= int64(n)
	c.Pass()
}

// Wait puts w among the writers waiting for the window that stopped it
// (Take found none): its own when that is spent, else the connection's,
// else, held at ShareLimit, the others' leaving. It reports whether w
// waits for the connection's window. A writer woken for the connection's
// window that now waits for its own passes that window on.
func (c *ConnSend[W]) Wait(w W) (forConn bool) {
	s := w.SendHalf()
	switch {
	case c.StreamWindow(w) <= 0:
		c.leave(w)
		heap.Push(&c.own, w)
		c.Pass() // what woke it is for another
		return false
	case c.window <= 0:
		c.leave(w)
		s.connAt = c.conn.PushBack(w)
		return true
	default:
		c.leave(w)
		s.sharing = true
		c.share[w] = struct{}{}
		return false
	}
}

// Leave takes w off the writers waiting for window, and passes on the
// connection's window it may have been woken for.
func (c *ConnSend[W]) Leave(w W) {
	c.leave(w)
	c.Pass()
}

// Unwait takes w off the writers waiting for window, as a writer does
// before it takes some (then Pass, after Take).
func (c *ConnSend[W]) Unwait(w W) { c.leave(w) }

// leave takes w off the writers waiting; when it was the last waiting
// for the connection's window, those held at ShareLimit may go on.
func (c *ConnSend[W]) leave(w W) {
	s := w.SendHalf()
	if s.heapAt > 0 {
		heap.Remove(&c.own, s.heapAt-1)
	}
	if s.sharing {
		s.sharing = false
		delete(c.share, w)
	}
	if s.connAt != nil {
		c.conn.Remove(s.connAt)
		s.connAt = nil
		c.connWaitersLeft(w)
	}
}

// connWaitersLeft wakes the writers held at ShareLimit once none waits
// for the connection's window, except w, the one leaving, which would
// only wait again.
func (c *ConnSend[W]) connWaitersLeft(w W) {
	if c.conn.Len() > 0 {
		return
	}
	for o := range c.share {
		if o != w {
			o.SendHalf().sharing = false
			delete(c.share, o)
			o.WakeWrite()
		}
	}
}

// Pass wakes the first writer waiting for the connection's window, while
// there is some: it takes what it needs and passes on what is left.
func (c *ConnSend[W]) Pass() {
	if c.window <= 0 {
		return
	}
	e := c.conn.Front()
	if e == nil {
		return
	}
	w := c.conn.Remove(e).(W)
	w.SendHalf().connAt = nil
	w.WakeWrite()
	c.connWaitersLeft(w)
}

// StreamUpdate takes a WINDOW_UPDATE of inc for stream w and reports
// whether it takes the stream's window past MaxWindow (a stream
// FLOW_CONTROL_ERROR, section 6.9.1). A writer waiting for window of its
// own, or held at ShareLimit, is woken.
func (c *ConnSend[W]) StreamUpdate(w W, inc uint32) (overflow bool) {
	s := w.SendHalf()
	s.delta += int64(inc)
	c.deltaBound = max(c.deltaBound, s.delta)
	s.uncredited = max(0, s.uncredited-int64(inc))
	if s.heapAt > 0 || s.sharing {
		c.leave(w)
		w.WakeWrite()
	}
	return c.StreamWindow(w) > MaxWindow
}

// ConnUpdate takes a WINDOW_UPDATE of inc for the connection and reports
// whether it takes the window past MaxWindow (a connection
// FLOW_CONTROL_ERROR, section 6.9.1); else it wakes the first writer
// waiting for it (Pass).
func (c *ConnSend[W]) ConnUpdate(inc uint32) (overflow bool) {
	c.credited += uint64(inc)
	c.window += int64(inc)
	if c.window > MaxWindow {
		return true
	}
	c.Pass()
	return false
}

// SetPeerWindow takes a new SETTINGS_INITIAL_WINDOW_SIZE of v, which
// applies to every open stream's window and may make it negative (section
// 6.9.2), and wakes the writers waiting for window of their own that it
// opens. It reports whether a stream's window would pass MaxWindow (a
// connection FLOW_CONTROL_ERROR), and then changes nothing. Only then are
// the open streams, all of them, visited.
func (c *ConnSend[W]) SetPeerWindow(v uint32, streams func(yield func(W) bool)) (overflow bool) {
	if int64(v)+c.deltaBound > MaxWindow {
		// Only a stream the peer credited past the setting can
		// overflow: find the exact bound, which a peer can make stale
		// only by a stream's DATA or end, not by SETTINGS.
		var most int64
		for w := range streams {
			most = max(most, w.SendHalf().delta)
		}
		c.deltaBound = most
		if int64(v)+most > MaxWindow {
			return true
		}
	}
	grew := int32(v) > c.peerWindow
	c.peerWindow = int32(v)
	if grew {
		for len(c.own) > 0 && c.StreamWindow(c.own[0]) > 0 {
			w := heap.Pop(&c.own).(W)
			w.WakeWrite()
		}
	}
	return false
}

// waitHeap is a heap of the writers waiting for window of their own, the
// one with the largest delta (the first a larger
// SETTINGS_INITIAL_WINDOW_SIZE opens) first. A stream's heapAt is its
// index plus one, 0 when it is not in the heap.
type waitHeap[W Writer] []W

func (h waitHeap[W]) Len() int           { return len(h) }
func (h waitHeap[W]) Less(i, j int) bool { return h[i].SendHalf().delta > h[j].SendHalf().delta }
func (h waitHeap[W]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].SendHalf().heapAt, h[j].SendHalf().heapAt = i+1, j+1
}

func (h *waitHeap[W]) Push(x any) {
	w := x.(W)
	w.SendHalf().heapAt = len(*h) + 1
	*h = append(*h, w)
}

func (h *waitHeap[W]) Pop() any {
	old := *h
	w := old[len(old)-1]
	var zero W
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	w.SendHalf().heapAt = 0
	return w
}
