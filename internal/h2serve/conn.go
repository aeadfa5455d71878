package h2serve

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/h2core"
	"github.com/wsgate/wsgate/internal/wake"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ErrConnLost is what the streams of a connection that ended get from
// Read and Write (wrapped with the reason).
var ErrConnLost = errors.New("h2serve: connection lost")

// connError is a connection error (RFC 9113 section 5.4.1): the
// connection ends with GOAWAY carrying Code.
type connError = h2core.ConnError

// StreamError is what Read and Write return on a stream that was reset:
// by the client (Remote) or by this side.
type StreamError struct {
	// StreamID is the stream's identifier.
	StreamID uint32
	// Code is the RST_STREAM error code (RFC 9113 section 7).
	Code http2.ErrCode
	// Remote is true when the client sent the RST_STREAM.
	Remote bool
}

// Error says which stream was reset, by whom and why.
func (e *StreamError) Error() string {
	by := "this side"
	if e.Remote {
		by = "the client"
	}
	return fmt.Sprintf("h2serve: stream %d reset by %s: %v", e.StreamID, by, e.Code)
}

// conn is one HTTP/2 connection from a client. Its reader (serve)
// demultiplexes frames to streams; its writer (pumpWrites) writes what is
// queued. Lock order: wmu before mu.
type conn struct {
	srv *Server
	nc  net.Conn
	cfg settings
	fr  *http2.Framer     // reads belong to the reader, writes to wmu
	in  h2core.ReadBudget // what fr reads from; the reader's

	// wmu guards the queue of frames to write (q, whose lock it is:
	// the Framer's write side), the hpack encoder (whose state follows
	// the order of header blocks in the queue) and what follows.
	wmu  sync.Mutex
	q    *h2core.Queue
	henc *hpack.Encoder
	hbuf bytes.Buffer
	// roomWaiters are the streams whose Write waits for the queue to
	// drop below WriteQueue; the writer wakes them each time it takes
	// the queue.
	roomWaiters []*Stream

	closing chan struct{} // closed by fail: write what is queued, then close
	written chan struct{} // closed when the writer has returned

	mu         sync.Mutex
	streams    map[uint32]*Stream
	lastID     uint32 // highest stream identifier the client used
	goAwaySent bool
	peer       h2core.PeerSettings // the client's SETTINGS
	peerFrame  uint32              // peer.MaxFrameSize, for the streams
	// setWindow applies a SETTINGS_INITIAL_WINDOW_SIZE to the streams
	// (send.SetPeerWindow over them), made once.
	setWindow func(v uint32) (overflow bool)
	// send is the connection's send window and its streams' writers
	// waiting for window (h2core.ConnSend): a WINDOW_UPDATE wakes one,
	// a larger SETTINGS_INITIAL_WINDOW_SIZE those it opens.
	send h2core.ConnSend[*writer]
	// resets are the streams this side reset lately (a ring of
	// recentResets): frames the client sent before it saw the reset are
	// ignored (RFC 9113 section 5.1, "closed"), trailers included, where
	// a frame on another closed stream is an error; but DATA off the
	// request's content-length, and trailers that are malformed, still
	// reset it (PROTOCOL_ERROR), as they would have an open stream. A
	// RST_STREAM from the client takes its stream off: what it sends
	// after its own reset is an error.
	resets h2core.ResetRecords
	// ctrl is what the client may still spend on frames that do no
	// work: each costs one, DATA and HEADERS that do work earn one,
	// and each DATA frame sent owes two (the WINDOW_UPDATEs it calls
	// for). A client that overspends is cut (ENHANCE_YOUR_CALM).
	ctrl        h2core.ControlBudget
	recv        h2core.ConnRecv // the connection's receive window
	err         error           // set once the connection is ending
	gone        chan struct{}
	handlerDone sync.WaitGroup
	// handlers counts the streams whose Handler (or refusal) still runs,
	// reset ones included: new streams are refused while it is at
	// MaxConcurrentStreams, so a client that opens streams and resets
	// them at once (CVE-2023-44487, "rapid reset") gets no more work
	// done at a time than one that keeps them open.
	handlers uint32
	// idle, with IdleTimeout, runs while the connection has no stream.
	idle *time.Timer
	// goAwayFirst (under wmu) sends GOAWAY right after this side's
	// SETTINGS: Drain, or GoAway, came before they were queued
	// (settingsQueued, under wmu), and a GOAWAY must not go before them
	// (RFC 9113 section 3.4).
	goAwayFirst    bool
	settingsQueued bool
}

func newConn(s *Server, nc net.Conn) *conn {
	cfg := s.settings()
	c := &conn{
		srv:       s,
		nc:        nc,
		cfg:       cfg,
		closing:   make(chan struct{}),
		written:   make(chan struct{}),
		streams:   make(map[uint32]*Stream),
		peer:      h2core.NewPeerSettings(),
		peerFrame: defaultMaxFrameSize,
		gone:      wake.New(),
	}
	burst := controlBurst
	if s.ctrlBurst > 0 {
		burst = s.ctrlBurst
	}
	c.ctrl = h2core.NewControlBudget(burst, controlRefill, time.Now())
	c.resets.Init(recentResets)
	c.send.Init()
	c.recv.Init(cfg.connWindow)
	c.setWindow = func(v uint32) bool { return c.send.SetPeerWindow(v, c.writers) }
	c.in = h2core.ReadBudget{R: bufio.NewReaderSize(nc, 16<<10), Limit: h2core.ReadLimit(cfg.maxHeader, defaultMaxFrameSize)}
	c.q = h2core.NewQueue(&c.wmu, h2core.QueueConfig{
		WriteTimeout:   cfg.writeTimeout,
		MaxAnswerBytes: maxAnswerBytes,
		KeepCap:        keepOutCap,
		Lost:           func(cause error) error { return &connLostError{cause} },
		// One cause for the writer, the reader (whose queue fails with
		// it) and fail, whichever of them ends the connection first:
		// lost to the flood (ErrConnLost), of code ENHANCE_YOUR_CALM.
		Cut:   func(err error) { go c.fail(err) },
		Taken: c.roomMadeLocked,
	})
	c.fr = c.q.NewFramer(&c.in)
	c.fr.SetMaxReadFrameSize(defaultMaxFrameSize)
	c.fr.SetReuseFrames() // no frame is kept past the next read; DATA is copied
	c.fr.ReadMetaHeaders = hpack.NewDecoder(headerTableSize, nil)
	c.fr.MaxHeaderListSize = cfg.maxHeader
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// serve runs the connection: it queues this side's SETTINGS (the server
// preface, RFC 9113 section 3.4), starts the writer and reads frames until
// the connection ends.
func (c *conn) serve() error {
	if c.cfg.idleTimeout > 0 {
		c.mu.Lock()
		c.idle = time.AfterFunc(c.cfg.idleTimeout, c.onIdle)
		c.mu.Unlock()
	}
	go c.pumpWrites()
	err := c.queue(false, func(fr *http2.Framer) error {
		err := fr.WriteSettings(
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.maxStreams},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.cfg.streamWindow},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.maxHeader},
			http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1},
		)
		if err == nil && c.cfg.connWindow > defaultWindow {
			// The connection window grows by WINDOW_UPDATE, not by a
			// setting (section 6.9.2).
			err = fr.WriteWindowUpdate(0, c.cfg.connWindow-defaultWindow)
		}
		c.settingsQueued = true
		return err
	})
	c.wmu.Lock()
	first := c.goAwayFirst
	c.wmu.Unlock()
	if err == nil && first {
		c.goAway()
	}
	if err == nil {
		err = c.readFrames()
	}
	c.fail(err)
	<-c.written
	c.handlerDone.Wait()
	c.mu.Lock()
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	c.mu.Lock()
	err = c.err // the first cause
	c.mu.Unlock()
	var ce connError
	if errors.Is(err, io.EOF) || errors.Is(err, errGoneAway) || errors.As(err, &ce) && ce.Code == http2.ErrCodeNo {
		return nil
	}
	return err
}

// errGoneAway ends a connection that sent GOAWAY once its last stream ended.
var errGoneAway = errors.New("h2serve: closed after GOAWAY")

// readFrames is the connection's one reader. It returns why the
// connection ends; a connection error has had its GOAWAY queued.
func (c *conn) readFrames() error {
	first := true
	for {
		c.in.Reset()
		f, err := c.fr.ReadFrame()
		if err != nil {
			se, stream, end := h2core.ReadError(c.fr, err)
			if !stream {
				return c.goAwayWith(end)
			}
			if err := c.spend(); err != nil {
				return c.goAwayWith(err)
			}
			if err := c.onStreamError(se); err != nil {
				return c.goAwayWith(err)
			}
			first = false
			continue
		}
		if first {
			// The client preface ends with a SETTINGS frame (section 3.4).
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				return c.goAwayWith(connError{Code: http2.ErrCodeProtocol, Reason: "first frame is not SETTINGS (RFC 9113 section 3.4)"})
			}
			first = false
		}
		if err := c.handle(f); err != nil {
			return c.goAwayWith(err)
		}
	}
}

// goAwayWith queues GOAWAY for a connection error and returns err.
func (c *conn) goAwayWith(err error) error {
	c.mu.Lock()
	last := c.lastID
	c.mu.Unlock()
	if c.q.GoAway(last, err) {
		c.q.Kick()
	}
	return err
}

// onStreamError answers a stream error the Framer found (RFC 9113 section
// 5.4.2). A malformed header block that opened a stream still opened it
// (its hpack state is decoded), so it is reset like any other.
func (c *conn) onStreamError(se http2.StreamError) error {
	id := se.StreamID
	if id == 0 || id%2 == 0 {
		return connError{Code: se.Code, Reason: "stream error on a stream the client cannot use"}
	}
	c.mu.Lock()
	if id > c.lastID {
		c.lastID = id
	}
	c.mu.Unlock()
	c.resetStream(id, se.Code, nil)
	return nil
}

// handle acts on one frame; an error ends the connection.
func (c *conn) handle(f http2.Frame) error {
	switch f.(type) {
	case *http2.DataFrame, *http2.MetaHeadersFrame:
		// They spend or earn as they are worth (onData, onHeaders).
	default:
		if err := c.spend(); err != nil {
			return err
		}
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil // this side sends no PING
		}
		return c.queue(true, func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
	case *http2.GoAwayFrame:
		// The client opens no more streams; those open go on.
		return nil
	case *http2.PushPromiseFrame:
		return connError{Code: http2.ErrCodeProtocol, Reason: "PUSH_PROMISE from a client (RFC 9113 section 8.4)"}
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			// A stream cannot depend on itself (RFC 9113 section 5.3.1).
			c.resetStream(f.StreamID, http2.ErrCodeProtocol, nil)
		}
	}
	// PRIORITY and unknown frame types are otherwise ignored (sections
	// 5.3.2, 5.5).
	return nil
}

// spend charges one frame that does no work to the control budget
// (ctrl), and returns the connection error that cuts a client
// whose budget is spent.
func (c *conn) spend() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spendLocked()
}

func (c *conn) spendLocked() error { return c.ctrl.Spend(time.Now()) }

// earnLocked credits n to the control budget, within its burst.
func (c *conn) earnLocked(n int) { c.ctrl.Earn(n) }

// lookup finds the stream a frame is for. A stream the client has not
// opened is idle, and a frame on it a connection error (RFC 9113 section
// 5.1); nil with no error is a stream that has ended, whose late frames
// are ignored. Called with c.mu held.
func (c *conn) lookup(h http2.FrameHeader) (*Stream, error) {
	if s := c.streams[h.StreamID]; s != nil {
		return s, nil
	}
	if h.StreamID%2 == 0 || h.StreamID > c.lastID {
		return nil, connError{Code: http2.ErrCodeProtocol, Reason: fmt.Sprintf("%v on idle stream %d", h.Type, h.StreamID)}
	}
	return nil, nil
}

// onSettings applies the client's SETTINGS (h2core.PeerSettings) and
// acknowledges them.
func (c *conn) onSettings(f *http2.SettingsFrame) error {
	c.mu.Lock()
	ch, err := c.peer.Apply(f, c.setWindow)
	c.peerFrame = c.peer.MaxFrameSize
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.queue(true, func(fr *http2.Framer) error {
		if ch.TableSizeSet {
			// The encoder's table follows the decoder's size; the
			// update is signalled in the next header block (RFC 7541
			// section 6.3), which the queue orders after this point.
			c.henc.SetMaxDynamicTableSizeLimit(ch.TableSize)
		}
		return fr.WriteSettingsAck()
	})
}

func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	selfDep := f.HasPriority() && f.Priority.StreamDep == id
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		// Trailers: they end the stream (RFC 9113 section 8.1).
		var code http2.ErrCode
		switch {
		case s.core.RemoteEnded:
			code = http2.ErrCodeStreamClosed
		case !f.StreamEnded(), selfDep, len(f.PseudoFields()) > 0:
			code = http2.ErrCodeProtocol // trailers end the stream and hold no pseudo-header field (section 8.1)
		case s.core.BodyLeft() > 0:
			code = http2.ErrCodeProtocol // short of its content-length (section 8.1.1)
		default:
			s.core.RemoteEnded = true
			s.readableLocked()
			s.maybeEndLocked()
		}
		var err error
		if code != 0 {
			err = c.spendLocked()
		}
		c.mu.Unlock()
		if code != 0 {
			c.resetStream(id, code, nil)
		}
		return err
	}
	if id%2 == 0 {
		c.mu.Unlock()
		// A client's streams are odd (section 5.1.1).
		return connError{Code: http2.ErrCodeProtocol, Reason: fmt.Sprintf("HEADERS on stream %d, not a client stream", id)}
	}
	if id <= c.lastID {
		if r := c.resets.Of(id); r != nil {
			// Sent before the client saw this side's reset: ignored
			// (section 5.1), though its block was decoded, as the
			// connection's hpack state requires; unless it is not
			// trailers, or ends a body short of its content-length.
			malformed := !f.StreamEnded() || selfDep || len(f.PseudoFields()) > 0 || r.Left > 0
			r.Left = -1
			err := c.spendLocked()
			c.mu.Unlock()
			if err == nil && malformed {
				c.resetStream(id, http2.ErrCodeProtocol, nil)
			}
			return err
		}
		c.mu.Unlock()
		// A closed stream cannot be reopened (section 5.1), nor can a
		// stream below one opened (section 5.1.1).
		return connError{Code: http2.ErrCodeProtocol, Reason: fmt.Sprintf("HEADERS on stream %d, closed or below the last one opened", id)}
	}
	c.lastID = id
	var refuse http2.ErrCode
	var req *Request
	var malformed string
	switch {
	case selfDep:
		refuse = http2.ErrCodeProtocol // a stream cannot depend on itself (section 5.3.1)
	case c.goAwaySent || c.err != nil:
		refuse = http2.ErrCodeRefusedStream // above GOAWAY's last stream: not processed
	case uint32(len(c.streams)) >= c.cfg.maxStreams || c.handlers >= c.cfg.maxStreams:
		refuse = http2.ErrCodeRefusedStream // section 5.1.2
	case f.Truncated:
		req = &Request{Header: http.Header{}}
	default:
		req, malformed = parseRequest(f.Fields)
		if req != nil && f.StreamEnded() && req.ContentLength > 0 {
			req, malformed = nil, "a content-length above the body END_STREAM ends with (RFC 9113 section 8.1.1)"
		}
		if req == nil {
			refuse = http2.ErrCodeProtocol // malformed (section 8.1.1)
		}
	}
	if refuse != 0 {
		err := c.spendLocked()
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if refuse == http2.ErrCodeRefusedStream {
			c.srv.refused.Add(1)
		}
		if malformed != "" && c.srv.Malformed != nil {
			c.srv.Malformed(malformed)
		}
		c.resetStream(id, refuse, nil)
		return nil
	}
	s := &Stream{c: c, id: id, req: req, connect: req != nil && req.Method == http.MethodConnect}
	bodyLen := int64(-1)
	if req != nil && req.ContentLength >= 0 {
		bodyLen = req.ContentLength
	}
	s.core.Init(c.cfg.streamWindow, bodyLen)
	s.core.RemoteEnded = f.StreamEnded()
	c.earnLocked(1)
	c.streams[id] = s
	if c.idle != nil {
		c.idle.Stop()
	}
	c.srv.streamsUp.Add(1)
	c.srv.opened.Add(1)
	c.handlers++
	c.handlerDone.Add(1)
	c.mu.Unlock()
	if f.Truncated {
		go s.runRefusal(431, "request header fields too large")
	} else {
		go s.runHandler()
	}
	return nil
}

func (c *conn) onData(f *http2.DataFrame) error {
	n := f.Header().Length // padding included (RFC 9113 section 6.1)
	c.mu.Lock()
	// DATA beyond the advertised window is a flow-control error (section
	// 6.9.1); it counts against the connection even on a closed stream.
	if !c.recv.Take(n) {
		c.mu.Unlock()
		return connError{Code: http2.ErrCodeFlowControl, Reason: "DATA beyond the connection window"}
	}
	s, err := c.lookup(f.Header())
	var streamInc uint32
	var resetCode http2.ErrCode
	data := f.Data()
	useful := false
	switch {
	case s == nil && err == nil:
		r := c.resets.Of(f.StreamID)
		switch {
		case r == nil:
			// A stream that ended, not by this side's reset (section
			// 5.1, "closed").
			resetCode = http2.ErrCodeStreamClosed
		case r.Left >= 0 && (int64(len(data)) > r.Left || f.StreamEnded() && int64(len(data)) != r.Left):
			// Ignored, but off its content-length all the same.
			r.Left = -1
			resetCode = http2.ErrCodeProtocol
		case r.Left >= 0:
			r.Left -= int64(len(data))
		}
	case s != nil:
		// Beyond the stream's window, after its END_STREAM or off its
		// content-length: a stream error (h2core.Stream.CheckData).
		if resetCode = s.core.CheckData(n, len(data), f.StreamEnded()); resetCode == 0 {
			useful = len(data) > 0 || f.StreamEnded()
			var buffered int
			buffered, streamInc = s.core.TakeData(n, data, f.StreamEnded(), false)
			if buffered > 0 || f.StreamEnded() {
				s.readableLocked()
			}
			s.maybeEndLocked()
		}
	}
	if err == nil {
		if useful {
			c.earnLocked(1)
		} else {
			err = c.spendLocked()
		}
	}
	connInc := c.recv.Credit()
	id := f.StreamID
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if resetCode != 0 {
		c.resetStream(id, resetCode, nil)
	}
	if connInc == 0 && streamInc == 0 {
		return nil
	}
	return c.queue(false, func(fr *http2.Framer) error {
		if connInc > 0 {
			if err := fr.WriteWindowUpdate(0, connInc); err != nil {
				return err
			}
		}
		if streamInc > 0 {
			return fr.WriteWindowUpdate(id, streamInc)
		}
		return nil
	})
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.lookup(f.Header())
	if s != nil {
		if err := c.spendEarlyResetLocked(s); err != nil { // see flood.go
			return err
		}
		s.finishLocked(&StreamError{StreamID: s.id, Code: f.ErrCode, Remote: true})
	}
	c.resets.Forget(f.StreamID)
	return err
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	if f.StreamID == 0 {
		defer c.mu.Unlock()
		if c.send.ConnUpdate(f.Increment) {
			return connError{Code: http2.ErrCodeFlowControl, Reason: "WINDOW_UPDATE overflows the connection window (RFC 9113 section 6.9.1)"}
		}
		return nil
	}
	s, err := c.lookup(f.Header())
	if s == nil {
		var overflow bool
		if r := c.resets.Of(f.StreamID); err == nil && r != nil && r.Window >= 0 {
			// Answered in full and reset (NO_ERROR) before the client
			// was done: what it sent before it saw the reset is still
			// checked, as the body is against its content-length.
			r.Window += int64(f.Increment)
			if overflow = r.Window > maxWindow; overflow {
				r.Window = -1
			}
		}
		c.mu.Unlock()
		if overflow {
			c.resetStream(f.StreamID, http2.ErrCodeFlowControl, nil) // a stream error (section 6.9.1)
		}
		return err
	}
	// A writer waiting for window of its own may go on.
	overflow := c.send.StreamUpdate(s.writer(), f.Increment)
	c.mu.Unlock()
	if overflow {
		c.resetStream(s.id, http2.ErrCodeFlowControl, nil) // a stream error (section 6.9.1)
	}
	return nil
}

// writers yields the connection's streams as writers, each visit
// counted as window work. Called with c.mu held.
func (c *conn) writers(yield func(*writer) bool) {
	for _, s := range c.streams {
		c.srv.windowWork.Add(1)
		if !yield(s.writer()) {
			return
		}
	}
}

// resetStream ends stream id with err (a *StreamError of code when nil)
// and queues RST_STREAM(code). Both happen under wmu, so no DATA of the
// stream is queued after its reset.
func (c *conn) resetStream(id uint32, code http2.ErrCode, err error) {
	if err == nil {
		err = &StreamError{StreamID: id, Code: code}
	}
	c.wmu.Lock()
	c.mu.Lock()
	left, window := int64(-1), int64(-1)
	if s := c.streams[id]; s != nil {
		if code == http2.ErrCodeNo {
			// An answered request: its body, and the window the
			// client may still be giving it, are still checked.
			left, window = s.core.BodyLeft(), c.send.StreamWindow(s.writer())
		}
		s.finishLocked(err)
	}
	c.resets.Record(id, left, window)
	c.mu.Unlock()
	c.queueLocked(true, func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
	c.wmu.Unlock()
}

// queue runs write with the Framer under wmu, which appends its frames to
// the connection's queue, and wakes the writer. answer says the frames
// answer the peer (h2core.Queue.AnswerLocked: counted against
// maxAnswerBytes until written). It fails only once the connection is
// ending.
func (c *conn) queue(answer bool, write func(fr *http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.queueLocked(answer, write)
}

func (c *conn) queueLocked(answer bool, write func(fr *http2.Framer) error) error {
	var err error
	if answer {
		err = c.q.AnswerLocked(write)
	} else {
		err = c.q.QueueLocked(write)
	}
	if err == nil {
		c.q.Kick()
	}
	return err
}

// pumpWrites is the connection's one writer: each time frames are queued
// it writes all of them (flush). When the connection ends it writes what
// is left (a GOAWAY) and closes it.
func (c *conn) pumpWrites() {
	defer close(c.written)
	defer c.nc.Close()
	for {
		select {
		case <-c.q.Kicked():
		case <-c.gone:
			c.mu.Lock()
			done := c.goAwaySent && len(c.streams) == 0
			c.mu.Unlock()
			if done {
				go c.fail(errGoneAway)
			}
			continue
		case <-c.closing:
			_ = c.flush()
			return
		}
		if err := c.flush(); err != nil {
			go c.fail(err)
			<-c.closing
			return
		}
	}
}

// flush writes what is queued, each 64 KiB within WriteTimeout
// (h2core.Queue.Flush).
func (c *conn) flush() error {
	// Streams woken at the same moment as this writer (one message fanned
	// out to many members) queue their frames now, and go in this write.
	runtime.Gosched()
	st, err := c.q.Flush(c.nc)
	c.srv.writes.Add(uint64(st.Writes))
	c.srv.frames.Add(uint64(st.Frames))
	return err
}

// roomMadeLocked wakes the Writes waiting for room in the queue: the
// writer took it, and they queue what follows while it is written.
// Called with wmu held.
func (c *conn) roomMadeLocked() {
	if len(c.roomWaiters) == 0 {
		return
	}
	c.mu.Lock()
	for _, s := range c.roomWaiters {
		s.roomWait = false
		wake.Signal(s.wwake)
	}
	c.mu.Unlock()
	clear(c.roomWaiters)
	c.roomWaiters = c.roomWaiters[:0]
}

// connLostError wraps why a connection was lost; it matches ErrConnLost.
type connLostError struct{ err error }

func (e *connLostError) Error() string { return "h2serve: connection lost: " + e.err.Error() }
func (e *connLostError) Unwrap() []error {
	return []error{ErrConnLost, e.err}
}

// onIdle sends GOAWAY on a connection that has had no stream for
// IdleTimeout; it closes at once, having none.
func (c *conn) onIdle() {
	c.mu.Lock()
	idle := len(c.streams) == 0 && c.handlers == 0
	c.mu.Unlock()
	if idle {
		c.goAway()
	}
}

// idleLocked starts the idle timer once the last stream has ended.
func (c *conn) idleLocked() {
	if c.idle != nil && len(c.streams) == 0 && c.err == nil {
		c.idle.Reset(c.cfg.idleTimeout)
	}
}

// handlerReturned counts a stream's Handler (or refusal) as done.
func (c *conn) handlerReturned() {
	c.mu.Lock()
	c.handlers--
	c.idleLocked()
	c.mu.Unlock()
	c.handlerDone.Done()
}

// fail ends the connection once: every stream fails, nothing more is
// queued, and the writer writes what is queued and closes the socket,
// which stops the reader.
func (c *conn) fail(err error) {
	if err == nil {
		err = io.EOF
	}
	lost := err
	if !errors.Is(lost, ErrConnLost) {
		lost = &connLostError{err}
	}
	c.wmu.Lock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return
	}
	c.err = err
	for _, s := range c.streams {
		s.finishLocked(lost)
	}
	c.mu.Unlock()
	c.q.FailLocked(lost)
	c.wmu.Unlock()
	close(c.closing)
}

// goAway sends GOAWAY(NO_ERROR) naming the last stream the client opened:
// it and those before go on, later ones are refused. The connection closes
// once no stream is left.
func (c *conn) goAway() {
	c.wmu.Lock()
	if !c.settingsQueued {
		c.goAwayFirst = true // serve sends it after SETTINGS
		c.wmu.Unlock()
		return
	}
	c.mu.Lock()
	if c.goAwaySent || c.err != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return
	}
	c.goAwaySent = true
	last := c.lastID
	c.mu.Unlock()
	_ = c.queueLocked(false, func(fr *http2.Framer) error { return fr.WriteGoAway(last, http2.ErrCodeNo, nil) })
	c.wmu.Unlock()
	wake.Signal(c.gone)
}

// close ends the connection now, after a GOAWAY(NO_ERROR).
func (c *conn) close() {
	c.goAway()
	c.fail(errGoneAway)
}
