package h2

import (
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
	s.wantWrite = false
	// Woken to take the connection's window, it passes it on.
	c.send.Leave(s.writer())
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

// writer is a Stream as its connection's send window sees it
// (h2core.Writer), a type of its own so that Stream's methods stay its
// API.
type writer Stream

func (s *Stream) writer() *writer { return (*writer)(s) }

// SendHalf returns the stream's send window.
func (w *writer) SendHalf() *h2core.Send { return &w.core.Send }

// WakeWrite wakes the stream's writer: a send window may have grown.
// Called with c.mu held.
func (w *writer) WakeWrite() {
	w.c.writerWakes++
	wake.Signal(w.wwake)
	if w.wantWrite {
		w.wantWrite = false
		w.notify()
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
		c.send.Unwait(s.writer())
		switch {
		case s.core.Err != nil:
			err := s.core.Err
			c.send.Pass()
			c.mu.Unlock()
			return 0, err
		case s.core.LocalEnded || s.core.Ended:
			c.send.Pass()
			c.mu.Unlock()
			return 0, net.ErrClosed
		case s.held != nil:
			c.mu.Unlock()
			return 0, errHeld
		}
		if n := c.send.Take(s.writer(), want, int(c.peerFrame)); n > 0 {
			// What is left goes to the next waiting stream.
			c.send.Pass()
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
			c.send.Leave(s.writer())
			c.mu.Unlock()
			return 0, err
		}
	}
}

// waitLocked has the stream wait for the window that stopped it
// (h2core.ConnSend.Wait); waiting for the connection's arms the stall
// timer. Called with c.mu held.
func (s *Stream) waitLocked() {
	if s.c.send.Wait(s.writer()) {
		s.c.armStallLocked()
	}
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
	c.send.GiveBack(s.writer(), n) // the connection's window is back for the others
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
