package h2serve

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/h2core"
	"github.com/wsgate/wsgate/internal/wake"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Stream is one request stream of an HTTP/2 connection. After WriteHeader
// it is a net.Conn: Read returns the DATA the client sent, Write sends
// DATA, both honour their deadlines. One goroutine may read while another
// writes; Close and the deadline setters may be called from any goroutine.
// Errors: io.EOF once the client ended its side, os.ErrDeadlineExceeded
// for a passed deadline, a *StreamError for a reset stream, ErrConnLost
// (wrapped) for a lost connection, net.ErrClosed after Close.
type Stream struct {
	c   *conn
	id  uint32
	req *Request
	// linger, armed by Close, resets the stream if the client has not
	// ended its side within WriteTimeout.
	linger *time.Timer
	// detached is set by Detach, on the Handler's goroutine before it
	// returns.
	detached bool
	// connect: the request is a CONNECT, whose refusal by Respond is
	// reset at once.
	connect bool
	// roomWait is set, under c.wmu, while the stream is one of the
	// connection's roomWaiters.
	roomWait bool

	// Under c.mu:
	// rwake and wwake are signalled when a Read or a Write may proceed.
	// Each is made by the first Read or Write that waits: a stream used
	// with TryRead, or never short of send window, holds neither.
	rwake chan struct{}
	wwake chan struct{}
	// core is the stream's state, its receive half (the request's
	// content-length checked on it) and its send window.
	core       h2core.Stream
	onReadable func() // set by Detach: called when Read would not wait
	headSent   bool   // the response's HEADERS are queued
	// done, made by the first Done, is closed once the stream ends.
	done      chan struct{}
	rdeadline time.Time
	wdeadline time.Time
}

// errNoResponse is what Write returns before WriteHeader.
var errNoResponse = errors.New("h2serve: Write before WriteHeader")

// errAnswered is what WriteHeader and Respond return once the response
// head went.
var errAnswered = errors.New("h2serve: response already sent")

// ID returns the stream identifier.
func (s *Stream) ID() uint32 { return s.id }

// Request returns the stream's request, nil after Detach. It must not be
// modified.
func (s *Stream) Request() *Request { return s.req }

// runHandler runs the server's Handler for s, then closes s unless the
// Handler detached it.
func (s *Stream) runHandler() {
	defer s.c.handlerReturned()
	s.c.srv.Handler(s)
	if !s.detached {
		_ = s.Close()
	}
}

// Detach lets the Handler return without ending s: s stays open, with
// no goroutine of its own, until Close or a reset, and whoever holds it
// reads with TryRead (or Read) and writes with Write from goroutines of
// its own. onReadable is called from then on whenever a Read would not
// wait (DATA arrived, the client ended its side, the stream failed); it
// runs on the connection's reader with the connection locked, so it must
// not block nor call a method of s. What arrived before Detach is not
// signalled: call TryRead once after it. A detached stream holds neither
// its request (Request returns nil after Detach) nor, once read empty, a
// receive buffer, so an idle one costs little beyond its struct. Detach
// must be called by the Handler, before it returns.
func (s *Stream) Detach(onReadable func()) {
	c := s.c
	c.mu.Lock()
	s.onReadable = onReadable
	s.core.Release()
	c.mu.Unlock()
	s.detached = true
	s.req = nil
}

// readableLocked wakes a Read that waits, or the detached stream's
// onReadable.
func (s *Stream) readableLocked() {
	wake.Signal(s.rwake)
	if s.onReadable != nil {
		s.onReadable()
	}
}

// runRefusal answers s with status and a text body instead of calling
// the Handler.
func (s *Stream) runRefusal(status int, body string) {
	defer s.c.handlerReturned()
	defer s.Close()
	h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	_ = s.Respond(status, h, []byte(body))
}

// WriteHeader sends the response's HEADERS with status and the fields of
// h, leaving the stream open: a 2xx to an extended CONNECT opens the
// tunnel (RFC 8441 section 5), Write sends DATA. Connection-specific fields
// (RFC 9113 section 8.2.2) are left out.
func (s *Stream) WriteHeader(status int, h http.Header) error {
	return s.writeHead(status, h, false)
}

// Respond sends a complete response: status, the fields of h, a
// content-length and body, ending this side of the stream with
// END_STREAM. A request the client has not ended stays half-closed
// (local) until it does (RFC 9113 section 8.1), its frames handled as on
// any open stream: once the Handler returned, its DATA is discarded and
// its window given back, checked against its content-length, and the
// stream is reset (CANCEL) if the client has not ended it within
// WriteTimeout (Close). A CONNECT refused this way is reset at once
// (NO_ERROR), which its client waits for; what the client sent after the
// reset crossed it is ignored, though still checked against the
// stream's window (see conn.resets). Without a write deadline set, the
// body gets WriteTimeout to find send window; a body that cannot go
// resets the stream (CANCEL).
func (s *Stream) Respond(status int, h http.Header, body []byte) error {
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if err := s.writeHead(status, h, len(body) == 0); err != nil {
		return err
	}
	c := s.c
	if len(body) > 0 {
		c.mu.Lock()
		if s.wdeadline.IsZero() {
			s.wdeadline = time.Now().Add(c.cfg.writeTimeout)
		}
		c.mu.Unlock()
		_, err := s.Write(body)
		if err == nil {
			err = s.closeWrite()
		}
		if err != nil {
			c.resetStream(s.id, http2.ErrCodeCancel, net.ErrClosed)
			return err
		}
	}
	c.mu.Lock()
	stop := s.connect && !s.core.Ended && !s.core.RemoteEnded
	c.mu.Unlock()
	if stop {
		c.resetStream(s.id, http2.ErrCodeNo, net.ErrClosed)
	}
	return nil
}

// writeHead queues the response's header block, in HEADERS and, beyond
// the client's SETTINGS_MAX_FRAME_SIZE, CONTINUATION frames.
func (s *Stream) writeHead(status int, h http.Header, end bool) error {
	c := s.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	var err error
	switch {
	case s.core.Err != nil:
		err = s.core.Err
	case s.headSent:
		err = errAnswered
	case s.core.Ended || s.core.ReadClosed:
		err = net.ErrClosed
	}
	if err != nil {
		c.mu.Unlock()
		return err
	}
	s.headSent = true
	if end {
		s.core.LocalEnded = true
	}
	frame := int(c.peerFrame)
	c.mu.Unlock()

	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(status)})
	for name, values := range h {
		lower := strings.ToLower(name)
		switch lower {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "te":
			continue
		}
		for _, v := range values {
			_ = c.henc.WriteField(hpack.HeaderField{Name: lower, Value: v})
		}
	}
	block := c.hbuf.Bytes()
	err = c.queueLocked(false, func(fr *http2.Framer) error {
		first := true
		for first || len(block) > 0 {
			n := min(len(block), frame)
			frag := block[:n]
			block = block[n:]
			var err error
			if first {
				err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
				first = false
			} else {
				err = fr.WriteContinuation(s.id, len(block) == 0, frag)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && end {
		c.mu.Lock()
		s.core.EndSent = true
		s.maybeEndLocked()
		c.mu.Unlock()
	}
	return err
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
// received before (h2core.Stream.Read).
func (s *Stream) finishLocked(err error) {
	c := s.c
	first := s.core.Finish(err)
	s.readableLocked()
	wake.Signal(s.wwake)
	if !first {
		return
	}
	// It waits for no window any more; woken for the connection's, it
	// passes it on.
	c.send.Leave(s.writer())
	if s.done != nil {
		close(s.done)
	}
	if s.linger != nil {
		s.linger.Stop()
	}
	delete(c.streams, s.id)
	c.idleLocked()
	c.srv.streamsUp.Add(-1)
	wake.Signal(c.gone)
}

// Done returns a channel closed once the stream has ended: reset by
// either side, its connection lost, or both sides ended. A handler
// that waits on something else (a node's answer) gives up when it
// closes.
func (s *Stream) Done() <-chan struct{} {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
		if s.core.Ended {
			close(s.done)
		}
	}
	return s.done
}

// Read reads what the client sent on the stream: what came before a
// reset or a lost connection first, and io.EOF once the client ended its
// side, whatever ended the stream after.
func (s *Stream) Read(p []byte) (int, error) {
	for {
		n, ch, dl, err := s.tryRead(p, true)
		if n > 0 || err != nil || len(p) == 0 {
			return n, err
		}
		if err := wake.Wait(ch, dl); err != nil {
			return 0, err
		}
	}
}

// TryRead is Read without the wait: when nothing is buffered and the
// stream has not ended or failed, it returns 0 and a nil error at once.
// It ignores the read deadline.
func (s *Stream) TryRead(p []byte) (int, error) {
	n, _, _, err := s.tryRead(p, false)
	return n, err
}

// WaitRead waits, as long as the read deadline allows, until a Read
// would not wait: bytes are buffered, the client ended its side, or the
// stream ended. It holds no buffer while it waits, so that a reader that
// takes one only once there is something to read (internal/pollread)
// costs an idle stream none (a detached stream drops its own receive
// buffer each time it is read empty). One goroutine reads a stream at a
// time.
func (s *Stream) WaitRead() error {
	c := s.c
	for {
		c.mu.Lock()
		ready := s.core.Readable()
		if !ready && s.rwake == nil {
			s.rwake = wake.New()
		}
		ch, dl := s.rwake, s.rdeadline
		c.mu.Unlock()
		if ready {
			return nil
		}
		if err := wake.Wait(ch, dl); err != nil {
			return err
		}
	}
}

// Err returns why the stream failed (reset by either side, its
// connection lost), net.ErrClosed after Close, or nil: what Read
// returns once it has read what came before, asked without reading.
func (s *Stream) Err() error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.core.ReadClosed {
		return net.ErrClosed
	}
	return s.core.Err
}

// tryRead reads what is buffered, or returns Read's error, or else 0, a
// nil error, and (with wait) the channel to wait for more on and the read
// deadline to wait until.
func (s *Stream) tryRead(p []byte, wait bool) (int, chan struct{}, time.Time, error) {
	c := s.c
	c.mu.Lock()
	n, inc, err, ready := s.core.Read(p)
	if ready {
		c.mu.Unlock()
		if inc > 0 {
			_ = c.queue(false, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(s.id, inc) })
		}
		return n, nil, time.Time{}, err
	}
	if wait && s.rwake == nil {
		s.rwake = wake.New()
	}
	ch, dl := s.rwake, s.rdeadline
	c.mu.Unlock()
	return 0, ch, dl, nil
}

// Write sends p as DATA frames, each within the client's
// SETTINGS_MAX_FRAME_SIZE, waiting for send window on the stream and the
// connection (RFC 9113 section 6.9), and for room in the connection's
// queue (Server.WriteQueue), until the write deadline. It returns once
// the frames are queued for the connection's writer.
func (s *Stream) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if err := s.waitRoom(); err != nil {
			return written, err
		}
		n, err := s.reserve(len(p))
		if err != nil {
			return written, err
		}
		var cancelled error
		if err := s.c.queue(false, func(fr *http2.Framer) error {
			// Under wmu: a reset or END_STREAM queued since reserve was
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

// waitRoom waits, until the write deadline, while the connection's queue
// holds WriteQueue bytes or more. It returns nil at once when the stream
// or the connection can take no more DATA: reserve or queue says why. It
// holds no lock while it waits.
func (s *Stream) waitRoom() error {
	c := s.c
	for {
		c.wmu.Lock()
		if c.q.ErrLocked() != nil || c.q.LenLocked() < c.cfg.writeQueue {
			c.wmu.Unlock()
			return nil
		}
		c.mu.Lock()
		if s.core.Err != nil || s.core.LocalEnded || s.core.Ended {
			c.mu.Unlock()
			c.wmu.Unlock()
			return nil
		}
		if s.wwake == nil {
			s.wwake = wake.New()
		}
		ch, dl := s.wwake, s.wdeadline
		c.mu.Unlock()
		if !s.roomWait {
			s.roomWait = true
			c.roomWaiters = append(c.roomWaiters, s)
		}
		c.wmu.Unlock()
		if err := wake.Wait(ch, dl); err != nil {
			return err
		}
	}
}

// reserve takes up to want bytes of send window from the stream and the
// connection, waiting until some is there.
func (s *Stream) reserve(want int) (int, error) {
	c := s.c
	for {
		c.mu.Lock()
		switch {
		case s.core.Err != nil:
			err := s.core.Err
			c.send.Leave(s.writer())
			c.mu.Unlock()
			return 0, err
		case !s.headSent:
			c.mu.Unlock()
			return 0, errNoResponse
		case s.core.LocalEnded || s.core.Ended:
			c.send.Leave(s.writer())
			c.mu.Unlock()
			return 0, net.ErrClosed
		}
		if n := c.send.Take(s.writer(), want, int(c.peerFrame)); n > 0 {
			c.send.Leave(s.writer()) // and passes on what is left
			c.ctrl.Owe(2)            // the WINDOW_UPDATEs this DATA calls for
			c.mu.Unlock()
			return n, nil
		}
		if s.wwake == nil {
			s.wwake = wake.New()
		}
		c.send.Wait(s.writer())
		ch, dl := s.wwake, s.wdeadline
		c.mu.Unlock()
		if err := wake.Wait(ch, dl); err != nil {
			c.mu.Lock()
			c.send.Leave(s.writer())
			c.mu.Unlock()
			return 0, err
		}
	}
}

// writer is a Stream as its connection's send window sees it
// (h2core.Writer), a type of its own so that Stream's methods stay its
// API.
type writer Stream

func (s *Stream) writer() *writer { return (*writer)(s) }

// SendHalf returns the stream's send window.
func (w *writer) SendHalf() *h2core.Send { return &w.core.Send }

// WakeWrite wakes the stream's Write: a window it waits for grew.
func (w *writer) WakeWrite() {
	w.c.srv.windowWork.Add(1)
	wake.Signal(w.wwake)
}

// writable reports, with wmu held, whether n bytes reserved for DATA may
// still go: nil, or the error Write returns after giving the window back.
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

// closeWrite queues END_STREAM: this side sends nothing more (RFC 9113
// section 5.1, "half-closed (local)").
func (s *Stream) closeWrite() error {
	c := s.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if s.core.LocalEnded || s.core.Ended || s.core.Err != nil || !s.headSent {
		c.mu.Unlock()
		return nil
	}
	s.core.LocalEnded = true
	wake.Signal(s.wwake)
	c.mu.Unlock()
	err := c.queueLocked(false, func(fr *http2.Framer) error { return fr.WriteData(s.id, true, nil) })
	c.mu.Lock()
	s.core.EndSent = err == nil
	s.maybeEndLocked()
	c.mu.Unlock()
	return err
}

// Close ends this side of the stream: with END_STREAM once a response was
// sent, with RST_STREAM(INTERNAL_ERROR) if none was. It stops reading:
// what is buffered is dropped, what the client still sends is discarded
// and its window given back, and the stream ends when the client ends its
// side, or is reset (RST_STREAM(CANCEL)) if it has not within
// WriteTimeout. Read and Write return net.ErrClosed.
func (s *Stream) Close() error {
	c := s.c
	c.mu.Lock()
	if s.core.Ended {
		s.core.CloseRead()
		c.mu.Unlock()
		return nil
	}
	if !s.headSent {
		s.core.CloseRead() // the window it gives back goes with the reset
		c.mu.Unlock()
		c.resetStream(s.id, http2.ErrCodeInternal, net.ErrClosed)
		return nil
	}
	_, inc, first := s.core.CloseRead()
	if first {
		wake.Signal(s.rwake)
		// A client that never ends its side would hold the stream, and
		// a place under MAX_CONCURRENT_STREAMS, for good.
		s.linger = time.AfterFunc(c.cfg.writeTimeout, s.abort)
	}
	c.mu.Unlock()
	if inc > 0 {
		_ = c.queue(false, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(s.id, inc) })
	}
	return s.closeWrite()
}

// abort resets the stream with RST_STREAM(CANCEL) (RFC 9113 section 6.4)
// unless it has ended.
func (s *Stream) abort() {
	c := s.c
	c.mu.Lock()
	open := !s.core.Ended
	c.mu.Unlock()
	if open {
		c.resetStream(s.id, http2.ErrCodeCancel, net.ErrClosed)
	}
}

// Conn returns the connection the stream is one of (a *tls.Conn for a
// connection whose ALPN chose h2), for what it says of itself (its TLS
// state, its addresses). Reading or writing it would break the
// connection.
func (s *Stream) Conn() net.Conn { return s.c.nc }

// LocalAddr returns the connection's local address.
func (s *Stream) LocalAddr() net.Addr { return s.c.nc.LocalAddr() }

// RemoteAddr returns the client's address.
func (s *Stream) RemoteAddr() net.Addr { return s.c.nc.RemoteAddr() }

// SetDeadline sets both deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
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
