package h2

import (
	"container/list"
	"net"
	"time"

	"github.com/wsgate/wsgate/internal/h2core"
	"github.com/wsgate/wsgate/internal/wake"
	"golang.org/x/net/http2"
)

// Stream is one WebSocket carried by an extended CONNECT stream. It is a
// net.Conn: Read returns what the node sent, Write sends DATA, both honour
// their deadlines. One goroutine may read while another writes; Close,
// CloseWrite, Abort and the deadline setters may be called from any
// goroutine. Errors: io.EOF once the node ended the stream (whatever
// came after its END_STREAM), os.ErrDeadlineExceeded for a passed
// deadline, a *StreamError (matching ErrStreamReset) for a reset stream,
// ErrConnLost (wrapped) for a lost connection, net.ErrClosed after Close
// or Abort; Read returns what the node sent before a reset or a lost
// connection first.
type Stream struct {
	c  *Conn
	id uint32
	// rwake and wwake are signalled when a Read or a Write may proceed;
	// each is made, under c.mu, only when one first has to wait, so a
	// stream its poller reads and writes without waiting holds neither
	// (signalling a nil one does nothing).
	rwake     chan struct{}
	wwake     chan struct{}
	responded chan struct{} // closed once the response is known
	// linger, armed by Close, resets the stream if the node has not
	// ended its side within Config.WriteTimeout.
	linger *time.Timer
	// notify, set by Notify, is called under c.mu when the stream may
	// have become readable, or writable after a WriteNB fell short
	// (wantWrite).
	notify    func()
	wantWrite bool

	// held, under c.mu, is the loss of the connection while the Set puts
	// off the stream's end (see herd.go): what is buffered is read, what
	// is written dropped, until the stream ends with it.
	held error

	// Under c.mu:
	// sendDelta is what this side may still send (RFC 9113 section 6.9)
	// less the node's SETTINGS_INITIAL_WINDOW_SIZE (see sendWindowLocked).
	sendDelta  int64
	uncredited int64 // DATA sent that the node has not credited back to the stream (Config.StreamSendLimit)
	// windowAt: a Write waits for the connection's send window, at
	// windowAt in Conn.windowWaiting; nil when it does not.
	windowAt *list.Element
	// waitingShare: a Write (or WriteNB) stopped at the stream's
	// StreamSendLimit while others wait (s is in Conn.shareWaiting).
	waitingShare bool
	// waitingStream: a Write (or WriteNB) stopped on the stream's own
	// send window (s is in Conn.streamWaiting).
	waitingStream bool
	// core is the stream's state, its receive half and its send
	// window.
	core       h2core.Stream
	status     int
	respHeader map[string][]string
	body       []byte
	didRespond bool
	rdeadline  time.Time
	wdeadline  time.Time
}

// ID returns the stream identifier.
func (s *Stream) ID() uint32 { return s.id }

// ok reports whether the response was a success (RFC 8441 section 5: a
// 2xx status). Called with c.mu held or once the response is known.
func (s *Stream) ok() bool { return s.status >= 200 && s.status < 300 }

// respond makes the response available to OpenWebSocket. Called with
// c.mu held.
func (s *Stream) respond() {
	if !s.didRespond {
		s.didRespond = true
		close(s.responded)
	}
}

// maybeEndLocked ends the stream once both sides sent END_STREAM (RFC 9113
// section 5.1, "closed").
func (s *Stream) maybeEndLocked() {
	if s.core.BothEnded() {
		s.finishLocked(nil)
	}
}

// finishLocked removes the stream from the connection. With an error,
// Write returns err from now on, and Read once it has returned what was
// received before (h2core.Stream.Read): a node's last bytes, its
// WebSocket close frame among them, are read even when a reset follows
// them at once (HAProxy resets a stream microseconds after its
// END_STREAM).
func (s *Stream) finishLocked(err error) {
	c := s.c
	first := s.core.Finish(err)
	s.respond()
	wake.Signal(s.rwake)
	wake.Signal(s.wwake)
	if s.notify != nil {
		s.notify()
	}
	if !first {
		return
	}
	// It waits for nothing any more: a stream that ended waiting for the
	// connection's window would hold every other at its StreamSendLimit.
	s.waitWindowLocked(false)
	s.waitStreamLocked(false)
	s.waitShareLocked(false)
	s.wantWrite = false
	// Woken to take the connection's window, it passes it on.
	c.passWindowLocked()
	if s.linger != nil {
		s.linger.Stop()
	}
	delete(c.streams, s.id)
	wake.Signal(c.gone)
}

// readWakeLocked returns rwake, made if it was not. Called with c.mu held.
func (s *Stream) readWakeLocked() chan struct{} {
	if s.rwake == nil {
		s.rwake = wake.New()
	}
	return s.rwake
}

// wakeReader wakes the stream's reader: bytes, the node's END_STREAM or
// an error arrived. Called with c.mu held.
func (s *Stream) wakeReader() {
	wake.Signal(s.rwake)
	if s.notify != nil {
		s.notify()
	}
}

// wakeWriter wakes the stream's writer: a send window may have grown.
// Called with c.mu held.
func (s *Stream) wakeWriter() {
	s.c.writerWakes++
	wake.Signal(s.wwake)
	if s.wantWrite {
		s.wantWrite = false
		s.notify()
	}
}

// Read reads what the node sent on the stream.
func (s *Stream) Read(p []byte) (int, error) {
	c := s.c
	for {
		c.mu.Lock()
		n, inc, err, ready := s.readLocked(p)
		dl, ch := s.rdeadline, s.readWakeLocked()
		c.mu.Unlock()
		if ready {
			if inc > 0 {
				c.sendFrames(s.windowUpdate(inc))
			}
			return n, err
		}
		if err := wake.Wait(ch, dl); err != nil {
			return 0, err
		}
	}
}

// readLocked is a Read that does not wait (h2core.Stream.Read): ready
// is false when it would have; inc is the window to give back to the
// node by WINDOW_UPDATE. Called with c.mu held.
func (s *Stream) readLocked(p []byte) (n int, inc uint32, err error, ready bool) {
	n, inc, err, ready = s.core.Read(p)
	s.c.buffered -= n
	return n, inc, err, ready
}

// WaitRead waits, as long as the read deadline allows, until a Read
// would not block: bytes are buffered, the node ended its side, or the
// stream ended. It holds no buffer while it waits, so that a reader that
// takes a buffer only once there is something to read (internal/pollread)
// costs an idle stream none. One goroutine reads a stream at a time.
func (s *Stream) WaitRead() error {
	c := s.c
	for {
		c.mu.Lock()
		ready := s.core.Readable()
		dl, ch := s.rdeadline, s.readWakeLocked()
		c.mu.Unlock()
		if ready {
			return nil
		}
		if err := wake.Wait(ch, dl); err != nil {
			return err
		}
	}
}

// Write sends p as DATA frames, each within the node's SETTINGS_MAX_FRAME_SIZE,
// waiting for send window on the stream and the connection (RFC 9113
// section 6.9) until the write deadline.
func (s *Stream) Write(p []byte) (int, error) {
	c := s.c
	written := 0
	for len(p) > 0 {
		n, err := s.reserve(len(p))
		if err == errHeld {
			return written + len(p), nil // see herd.go
		}
		if err != nil {
			return written, err
		}
		var cancelled error
		if err := c.writeFrames(func(fr *http2.Framer) error {
			// Under the write lock: a CloseWrite, Close or reset that
			// came in since reserve has sent, or will send after this,
			// the stream's last frame; DATA must not follow it (RFC 9113
			// section 5.1). The window taken goes back.
			if cancelled = s.writable(n); cancelled != nil {
				return nil
			}
			return fr.WriteData(s.id, false, p[:n])
		}); err != nil {
			return written, err
		}
		if cancelled != nil {
			return written, cancelled
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// reserve takes up to want bytes of send window from the stream and the
// connection, waiting until some is there.
func (s *Stream) reserve(want int) (int, error) {
	c := s.c
	for {
		c.mu.Lock()
		s.waitWindowLocked(false)
		s.waitStreamLocked(false)
		s.waitShareLocked(false)
		switch {
		case s.core.Err != nil:
			err := s.core.Err
			c.passWindowLocked()
			c.mu.Unlock()
			return 0, err
		case s.core.LocalEnded || s.core.Ended:
			c.passWindowLocked()
			c.mu.Unlock()
			return 0, net.ErrClosed
		case s.held != nil:
			c.mu.Unlock()
			return 0, errHeld
		}
		if n := s.takeWindowLocked(want); n > 0 {
			// What is left goes to the next waiting stream.
			c.passWindowLocked()
			c.mu.Unlock()
			return n, nil
		}
		s.waitLocked()
		dl := s.wdeadline
		if s.wwake == nil {
			s.wwake = wake.New()
		}
		ch := s.wwake
		c.mu.Unlock()
		if err := wake.Wait(ch, dl); err != nil {
			c.mu.Lock()
			s.waitWindowLocked(false)
			s.waitShareLocked(false)
			c.passWindowLocked()
			c.mu.Unlock()
			return 0, err
		}
	}
}

// takeWindowLocked takes up to want bytes, at most one frame's, of send
// window from the stream and the connection; 0 when there is none to
// take. Called with c.mu held.
func (s *Stream) takeWindowLocked(want int) int {
	c := s.c
	// Past its StreamSendLimit a stream waits only while another waits
	// for the connection's window: alone, it may use what the node gives
	// (a node may credit a stream only once half its window is spent,
	// which a hard limit would never reach).
	share := int64(c.cfg.StreamSendLimit) - s.uncredited
	if share <= 0 && c.windowWaiting.Len() == 0 {
		share = maxWindow
	}
	n := min(int64(want), s.sendWindowLocked(), c.sendWindow, int64(c.peerFrame), share)
	if n <= 0 {
		return 0
	}
	s.sendDelta -= n
	c.sendWindow -= n
	s.uncredited += n
	return int(n)
}

// sendWindowLocked is what the stream may still send: a change of the
// node's SETTINGS_INITIAL_WINDOW_SIZE applies to it without touching it.
// Called with c.mu held.
func (s *Stream) sendWindowLocked() int64 { return s.sendDelta + int64(s.c.peerWindow) }

// waitLocked marks the stream as waiting for the window that stopped it
// (takeWindowLocked found none): the connection's, which arms the stall
// timer, or its own. Called with c.mu held.
func (s *Stream) waitLocked() {
	c := s.c
	switch {
	case c.sendWindow <= 0:
		s.waitWindowLocked(true)
		c.armStallLocked()
	case s.sendWindowLocked() <= 0:
		s.waitStreamLocked(true)
	default:
		// Held at its StreamSendLimit while others wait.
		s.waitShareLocked(true)
	}
}

// waitShareLocked marks the stream as held at its StreamSendLimit while
// others wait for the connection's window, or no longer. Called with c.mu
// held.
func (s *Stream) waitShareLocked(waiting bool) {
	if s.waitingShare == waiting {
		return
	}
	s.waitingShare = waiting
	if waiting {
		s.c.shareWaiting[s] = struct{}{}
	} else {
		delete(s.c.shareWaiting, s)
	}
}

// waitStreamLocked marks the stream as waiting for its own send window,
// which a SETTINGS_INITIAL_WINDOW_SIZE may grow, or no longer. Called
// with c.mu held.
func (s *Stream) waitStreamLocked(waiting bool) {
	if s.waitingStream == waiting {
		return
	}
	s.waitingStream = waiting
	if waiting {
		s.c.streamWaiting[s] = struct{}{}
	} else {
		delete(s.c.streamWaiting, s)
	}
}

// waitWindowLocked marks the stream as waiting for the connection's send
// window, last in line, or no longer; when the last waiter leaves, the
// streams held at their StreamSendLimit may go on (see reserve). Called
// with c.mu held.
func (s *Stream) waitWindowLocked(waiting bool) {
	c := s.c
	if (s.windowAt != nil) == waiting {
		return
	}
	if waiting {
		s.windowAt = c.windowWaiting.PushBack(s)
		return
	}
	c.windowWaiting.Remove(s.windowAt)
	s.windowAt = nil
	c.windowWaitersLeftLocked(s)
}

// writable reports, with the connection's write lock held, whether n
// bytes reserved for DATA may still go: nil, or the error Write returns
// after giving the n bytes of window back.
func (s *Stream) writable(n int) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	switch {
	case s.core.Err != nil:
		err = s.core.Err
	case s.core.LocalEnded || s.core.Ended:
		err = net.ErrClosed
	default:
		return nil
	}
	s.sendDelta += int64(n)
	c.sendWindow += int64(n)
	s.uncredited -= int64(n)
	c.passWindowLocked() // the connection's window is back for the others
	return err
}

// queueable reports, under qmu, whether the stream may still have frames
// queued: no RST_STREAM was queued for it (resetStream ends the stream and
// queues its RST_STREAM in one hold of qmu), so nothing queued now can
// follow one. It takes c.mu.
func (s *Stream) queueable() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.core.Err == nil
}

// windowUpdate returns the queueing of a WINDOW_UPDATE of inc for the
// stream, dropped if the stream was reset meanwhile.
func (s *Stream) windowUpdate(inc uint32) func(fr *http2.Framer) error {
	return func(fr *http2.Framer) error {
		if !s.queueable() {
			return nil
		}
		return fr.WriteWindowUpdate(s.id, inc)
	}
}

// CloseWrite sends END_STREAM: this side sends nothing more, the node may
// (RFC 9113 section 5.1, "half-closed (local)"). Read goes on until the
// node ends its side. The frame is queued for the connection's flusher:
// CloseWrite does not wait for the network.
func (s *Stream) CloseWrite() error {
	c := s.c
	c.mu.Lock()
	if s.core.LocalEnded || s.core.Ended || s.core.Err != nil {
		c.mu.Unlock()
		return nil
	}
	if s.held != nil {
		// Its connection is gone: nothing more to wait for.
		s.finishLocked(s.held)
		c.mu.Unlock()
		return nil
	}
	s.core.LocalEnded = true
	wake.Signal(s.wwake)
	c.mu.Unlock()
	err := c.queueFrames(func(fr *http2.Framer) error {
		if !s.queueable() {
			return nil // reset meanwhile: its RST_STREAM is queued, nothing may follow
		}
		return fr.WriteData(s.id, true, nil)
	})
	c.mu.Lock()
	// Counted until END_STREAM is queued, ahead of any stream opened
	// after, so that a new stream never exceeds the node's limit.
	s.core.EndSent = err == nil
	s.maybeEndLocked()
	c.mu.Unlock()
	c.Kick()
	return err
}

// Close sends END_STREAM as CloseWrite does and stops reading: what is
// buffered is dropped, what the node still sends is discarded and its
// window given back, and the stream ends when the node ends its side, or
// is reset (RST_STREAM CANCEL) if it has not within Config.WriteTimeout.
// Read and Write return net.ErrClosed.
func (s *Stream) Close() error {
	c := s.c
	c.mu.Lock()
	dropped, inc, first := s.core.CloseRead()
	c.buffered -= dropped
	if first {
		s.wakeReader()
		if !s.core.Ended {
			// A node that never ends its side would hold the stream,
			// and a place under its MAX_CONCURRENT_STREAMS, for good.
			s.linger = time.AfterFunc(c.cfg.WriteTimeout, s.Abort)
		}
	}
	c.mu.Unlock()
	if inc > 0 {
		c.sendFrames(s.windowUpdate(inc))
	}
	return s.CloseWrite()
}

// Abort resets the stream with RST_STREAM(CANCEL) (RFC 9113 section 6.4):
// both directions end now and what is buffered is dropped.
func (s *Stream) Abort() {
	c := s.c
	c.mu.Lock()
	dropped, _, _ := s.core.CloseRead() // the window it gives back goes with the reset
	c.buffered -= dropped
	wasOpen := !s.core.Ended
	c.mu.Unlock()
	if wasOpen {
		c.resetStream(s.id, http2.ErrCodeCancel, net.ErrClosed)
	}
}

// LocalAddr returns the connection's local address.
func (s *Stream) LocalAddr() net.Addr { return s.c.nc.LocalAddr() }

// RemoteAddr returns the node's address.
func (s *Stream) RemoteAddr() net.Addr { return s.c.nc.RemoteAddr() }

// SetDeadline sets both deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read; a zero t means no deadline.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.rdeadline = t
	wake.Signal(s.rwake)
	s.c.mu.Unlock()
	return nil
}

// SetWriteDeadline bounds Write, including its wait for send window; a
// zero t means no deadline.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.wdeadline = t
	wake.Signal(s.wwake)
	s.c.mu.Unlock()
	return nil
}

var _ net.Conn = (*Stream)(nil)
