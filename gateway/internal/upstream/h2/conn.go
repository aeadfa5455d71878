package h2

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/h2core"
	"github.com/wsgate/wsgate/internal/wake"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	// defaultMaxFrameSize is SETTINGS_MAX_FRAME_SIZE's initial value, the
	// largest frame either side may send until the other raises it; this
	// side never raises it (RFC 9113 section 6.5.2).
	defaultMaxFrameSize = 16384
	// defaultWindow is the initial flow-control window of a connection and
	// of every stream (RFC 9113 section 6.9.2).
	defaultWindow = 65535
	// maxWindow is the largest flow-control window (RFC 9113 section 6.9.1).
	maxWindow = 1<<31 - 1
	// headerTableSize is the hpack dynamic table this side decodes with,
	// SETTINGS_HEADER_TABLE_SIZE's initial value, never changed.
	headerTableSize = 4096
	// maxAnswerBytes bounds the frames queued in answer to the node (PING
	// and SETTINGS acknowledgements) that have not left for the network:
	// a node that sends them faster than it reads their answers is
	// flooding, and its connection is cut (ENHANCE_YOUR_CALM,
	// h2core.Queue.AnswerLocked).
	maxAnswerBytes = h2core.MaxAnswerBytes
	// controlBurst and controlRate bound the PING and SETTINGS frames a
	// node may send (a token bucket: controlBurst at once, controlRate a
	// second after): each costs this side a pass of its reader and an
	// answer, and none is worth more than a few a second. A node past
	// them is cut (ENHANCE_YOUR_CALM).
	controlBurst = 1000
	controlRate  = 1000
)

// Config is how a Conn behaves; the zero value is usable.
type Config struct {
	// StreamWindow is each stream's receive window, advertised as
	// SETTINGS_INITIAL_WINDOW_SIZE: the most the node may send on a
	// stream before its reader consumes it, so the most buffered per
	// stream (default 64 KiB).
	StreamWindow uint32
	// ConnWindow is the connection's receive window (default 1 MiB; a
	// value below the initial 65,535 bytes takes the default).
	// Received DATA is credited back to it as soon as a stream buffered
	// it, since StreamWindow bounds each stream's buffer, so that a stream
	// whose reader stopped does not hold the connection.
	ConnWindow uint32
	// MaxHeaderBytes bounds a decoded response header block (hpack field
	// sizes, RFC 9113 section 6.5.2), advertised as
	// SETTINGS_MAX_HEADER_LIST_SIZE (default 16 KiB).
	MaxHeaderBytes uint32
	// MaxBody bounds what OpenWebSocket keeps of a non-2xx response body
	// (default 64 KiB); the rest is discarded and the stream reset.
	MaxBody int
	// WriteTimeout bounds every write to the network, each 64 KiB of a
	// longer one on its own: a connection that takes none within it is
	// lost (default 10s).
	WriteTimeout time.Duration
	// StreamSendLimit bounds what one stream may have sent that the node
	// has not yet credited back to it while another stream waits for the
	// connection's window (default 64 KiB): a node that gives the
	// connection's window back only as each stream's reader consumes
	// (Go's net/http does) would otherwise let one stream whose reader
	// stopped take the whole connection window, and every other stream
	// on the connection would stop. A stream alone may go past it.
	StreamSendLimit uint32
	// StallTimeout is how long the connection's send window may stay
	// spent, with no byte of it given back, while a stream waits to
	// send, before the stream holding the most uncredited bytes is reset
	// (unless it is the only one waiting), one per StallTimeout, so that
	// streams whose readers stopped cannot stall the others together
	// either (default 2s).
	StallTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.StreamWindow == 0 {
		c.StreamWindow = 64 << 10
	}
	if c.StreamWindow > maxWindow {
		c.StreamWindow = maxWindow
	}
	if c.ConnWindow < defaultWindow {
		c.ConnWindow = 1 << 20
	}
	if c.ConnWindow > maxWindow {
		c.ConnWindow = maxWindow
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 16 << 10
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 64 << 10
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.StreamSendLimit == 0 {
		c.StreamSendLimit = 64 << 10
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 2 * time.Second
	}
	return c
}

// Conn is the client side of one HTTP/2 connection to a node. It is safe
// for concurrent use: any number of goroutines may open streams, ping and
// close it.
type Conn struct {
	nc       net.Conn
	cfg      Config
	fr       *http2.Framer
	src      frameSource   // the Framer's reader
	readDone chan struct{} // closed when the reader goroutine returned
	away     chan struct{} // closed once the connection takes no new stream

	// qmu guards the frame queue (q, whose lock it is: the Framer's
	// write side) and what must follow its order: the hpack encoder
	// (whose state must follow the order of header blocks on the wire)
	// and stream identifiers (which must rise in that order, RFC 9113
	// section 5.1.1). Frames are queued under it, never written: it is
	// held across no network I/O. Lock order: the queue's writer before
	// qmu before mu.
	qmu  sync.Mutex
	q    *h2core.Queue
	henc *hpack.Encoder
	hbuf bytes.Buffer
	// nbWrite is writeNB, made once (see flushNB).
	nbWrite func([]byte) (int, error)

	mu        sync.Mutex
	streams   map[uint32]*Stream
	nextID    uint32
	peer      h2core.PeerSettings // the node's SETTINGS
	peerFrame uint32              // peer.MaxFrameSize, for the streams
	// setWindow applies a SETTINGS_INITIAL_WINDOW_SIZE to the streams
	// (send.SetPeerWindow over them), made once.
	setWindow func(v uint32) (overflow bool)
	// send is the connection's send window and its streams' writers
	// waiting for window (h2core.ConnSend): a WINDOW_UPDATE wakes one,
	// which takes what it needs and passes on what is left, so that it
	// costs one wakeup however many streams wait; its ShareLimit is
	// Config.StreamSendLimit.
	send h2core.ConnSend[*writer]
	// stall resets a stream when the send window stays spent (see
	// Config.StallTimeout), unless the node gave some of it back
	// (send.Credited) since it was armed. writerWakes counts the
	// wakeups of writers (tests read it).
	stall       *time.Timer
	writerWakes int64
	recv        h2core.ConnRecv // the connection's receive window
	goAway      bool            // GOAWAY received, or Shutdown called (see goAwayLocked)
	err         error           // set once the connection is lost; then every stream ends
	pings       map[[8]byte]chan struct{}
	pingSeq     uint64
	buffered    int           // bytes received and not read, over all streams
	gone        chan struct{} // signalled (capacity 1) when a stream ends
	// pendingTable is the node's SETTINGS_HEADER_TABLE_SIZE not yet given
	// to the encoder, which belongs to qmu.
	pendingTable *uint32

	// The reader's own (readLoop's goroutine, or the poller's): the
	// budget of the node's PING and SETTINGS frames (see controlBurst).
	ctrl h2core.ControlBudget

	// A polled connection's (see Poller): owner is the poller's token,
	// detach has the poller let go of it. The rest belongs to the
	// poller's goroutine: pfd is its descriptor of the socket (-1 until
	// the first PollRead and after PollDetached), rb what it read and
	// has not handled.
	owner  any
	detach func()
	pfd    int
	rb     []byte
	// pollEnds counts fail and PollDetached: readDone closes at the
	// second, once the connection has failed and the poller let go.
	pollEnds atomic.Int32

	// set is the Set that dialed the connection, which spreads the end
	// of its streams when it is lost (see herd.go); nil for a Conn of
	// its own.
	set *Set
}

// Handshake starts HTTP/2 with prior knowledge on nc (RFC 9113 section
// 3.3): it sends the client preface and this side's SETTINGS, waits for
// the node's SETTINGS and acknowledges them, then starts the reader. ctx
// bounds the handshake only. A node that does not enable extended CONNECT
// is ErrNoExtendedConnect. On error nc is closed.
func Handshake(ctx context.Context, nc net.Conn, cfg Config) (*Conn, error) {
	return HandshakePolled(ctx, nc, cfg, nil)
}

// HandshakePolled is Handshake, with the connection's reads run by poll
// when it takes them (see Poller), by a goroutine of its own otherwise.
func HandshakePolled(ctx context.Context, nc net.Conn, cfg Config, poll Poller) (*Conn, error) {
	cfg = cfg.withDefaults()
	c := &Conn{
		nc:        nc,
		cfg:       cfg,
		readDone:  make(chan struct{}),
		away:      make(chan struct{}),
		streams:   make(map[uint32]*Stream),
		nextID:    1,
		peer:      h2core.NewPeerSettings(),
		peerFrame: defaultMaxFrameSize,
		pings:     make(map[[8]byte]chan struct{}),
		gone:      wake.New(),
		pfd:       -1,
		ctrl:      h2core.NewControlBudget(controlBurst, controlRate, time.Now()),
	}
	c.send.Init()
	c.recv.Init(cfg.ConnWindow)
	c.send.ShareLimit = int64(cfg.StreamSendLimit)
	c.src.br = bufio.NewReaderSize(nc, 16<<10)
	c.src.in = h2core.ReadBudget{R: c.src.br, Limit: h2core.ReadLimit(cfg.MaxHeaderBytes, defaultMaxFrameSize)}
	c.q = h2core.NewQueue(&c.qmu, h2core.QueueConfig{
		WriteTimeout:   cfg.WriteTimeout,
		MaxAnswerBytes: maxAnswerBytes,
		Lost:           func(cause error) error { return &connLostError{cause} },
	})
	c.nbWrite = c.writeNB
	c.setWindow = func(v uint32) bool { return c.send.SetPeerWindow(v, c.writers) }
	c.fr = c.q.NewFramer(&c.src)
	c.fr.SetMaxReadFrameSize(defaultMaxFrameSize)
	c.fr.SetReuseFrames() // no frame is kept past the next read; DATA is copied
	c.fr.ReadMetaHeaders = hpack.NewDecoder(headerTableSize, nil)
	c.fr.MaxHeaderListSize = cfg.MaxHeaderBytes
	c.henc = hpack.NewEncoder(&c.hbuf)

	if err := c.handshake(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	go c.flushLoop()
	if poll != nil {
		// Set before the poller may call PollRead or fail may look.
		c.mu.Lock()
		c.owner, c.detach = poll(nc, c)
		polled := c.owner != nil
		c.mu.Unlock()
		if polled {
			return c, nil
		}
	}
	go c.readLoop()
	return c, nil
}

func (c *Conn) handshake(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	err := c.exchangeSettings()
	if !stop() || ctx.Err() != nil {
		return fmt.Errorf("h2: handshake: %w", ctx.Err())
	}
	if err != nil {
		return err
	}
	c.nc.SetDeadline(time.Time{})
	return nil
}

func (c *Conn) exchangeSettings() error {
	c.qmu.Lock()
	c.q.AppendLocked([]byte(http2.ClientPreface)...)
	// This side's SETTINGS must follow the preface (RFC 9113 section 3.4).
	err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.cfg.StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderBytes},
	)
	if err == nil && c.cfg.ConnWindow > defaultWindow {
		// The connection window is not a setting: it grows by
		// WINDOW_UPDATE on stream 0 (section 6.9.2).
		err = c.fr.WriteWindowUpdate(0, c.cfg.ConnWindow-defaultWindow)
	}
	c.qmu.Unlock()
	if err == nil {
		err = c.writeHandshake()
	}
	if err != nil {
		return fmt.Errorf("h2: write SETTINGS: %w", err)
	}
	// The server's preface is a SETTINGS frame (section 3.4); extended
	// CONNECT needs its SETTINGS_ENABLE_CONNECT_PROTOCOL before the first
	// :protocol request (RFC 8441 section 3), so wait for it.
	f, err := c.fr.ReadFrame()
	if err != nil {
		return fmt.Errorf("h2: read the node's SETTINGS: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("h2: the node's first frame is %v, not SETTINGS (RFC 9113 section 3.4)", f.Header())
	}
	c.mu.Lock()
	err = c.applySettings(sf)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if !c.peer.EnableConnectProtocol {
		return ErrNoExtendedConnect
	}
	if err := c.queueFrames(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }); err != nil {
		return fmt.Errorf("h2: acknowledge SETTINGS: %w", err)
	}
	if err := c.writeHandshake(); err != nil {
		return fmt.Errorf("h2: acknowledge SETTINGS: %w", err)
	}
	return nil
}

// writeHandshake writes what is queued during the handshake, under the
// deadline the handshake's context set on the connection.
func (c *Conn) writeHandshake() error {
	_, err := c.q.FlushNow(c.nc, 0, nil)
	return err
}

// applySettings takes the node's SETTINGS (h2core.PeerSettings); a
// SETTINGS_INITIAL_WINDOW_SIZE applies to every open stream's send
// window, which may go negative (RFC 9113 section 6.9.2), and wakes the
// writers it opens (h2core.ConnSend.SetPeerWindow). Called with c.mu held.
func (c *Conn) applySettings(f *http2.SettingsFrame) error {
	ch, err := c.peer.Apply(f, c.setWindow)
	c.peerFrame = c.peer.MaxFrameSize
	if ch.TableSizeSet {
		// The encoder belongs to qmu, which cannot be taken under mu:
		// the size applies before the next header block is encoded.
		table := ch.TableSize
		c.pendingTable = &table
	}
	return err
}

// writers yields the connection's streams as writers. Called with c.mu
// held.
func (c *Conn) writers(yield func(*writer) bool) {
	for _, s := range c.streams {
		if !yield(s.writer()) {
			return
		}
	}
}

// readLoop is the connection's one reader: it demultiplexes frames to
// streams until the connection ends, then ends every stream.
func (c *Conn) readLoop() {
	defer close(c.readDone)
	for {
		c.src.in.Reset()
		if err := c.onFrame(c.fr.ReadFrame()); err != nil {
			c.endRead(err)
			return
		}
	}
}

// onFrame acts on what one ReadFrame returned; an error is the
// connection's end.
func (c *Conn) onFrame(f http2.Frame, err error) error {
	if err == nil {
		return c.handle(f)
	}
	se, stream, end := h2core.ReadError(c.fr, err)
	if !stream {
		return end
	}
	// A stream error on a stream never opened is a connection error: no
	// RST_STREAM on an idle stream (RFC 9113 section 5.1).
	c.mu.Lock()
	_, err = c.lookup(http2.FrameHeader{StreamID: se.StreamID})
	c.mu.Unlock()
	if err == nil {
		c.resetStream(se.StreamID, se.Code, nil)
	}
	return err
}

// endRead ends the connection for err, which its reader met: a
// connection error of this side's finding is announced by GOAWAY first.
// A poller, which must not wait for the write, leaves both to a goroutine.
func (c *Conn) endRead(err error) {
	var ce connError
	if !errors.As(err, &ce) {
		c.fail(err)
		return
	}
	goAway := func() {
		// The GOAWAY follows what is queued, whose writes get a
		// WriteTimeout per chunk: the connection ends within one
		// WriteTimeout all the same.
		cut := time.AfterFunc(c.cfg.WriteTimeout, func() { c.fail(err) })
		if c.q.GoAway(0, ce) {
			c.flush()
		}
		cut.Stop()
		c.fail(err)
	}
	if c.pfd >= 0 {
		go goAway()
		return
	}
	goAway()
}

// handle acts on one frame; an error is the connection's end.
func (c *Conn) handle(f http2.Frame) error {
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
		if err := c.ctrl.Spend(time.Now()); err != nil {
			return err
		}
		c.mu.Lock()
		err := c.applySettings(f)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		return c.answer(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
	case *http2.PingFrame:
		if !f.IsAck() {
			if err := c.ctrl.Spend(time.Now()); err != nil {
				return err
			}
			return c.answer(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
		}
		c.mu.Lock()
		if ch, ok := c.pings[f.Data]; ok {
			delete(c.pings, f.Data)
			close(ch)
		}
		c.mu.Unlock()
	case *http2.GoAwayFrame:
		c.onGoAway(f)
	case *http2.PushPromiseFrame:
		return connError{Code: http2.ErrCodeProtocol, Reason: "PUSH_PROMISE although SETTINGS_ENABLE_PUSH is 0 (RFC 9113 section 8.4)"}
	}
	// PRIORITY, PRIORITY_UPDATE and unknown frame types are ignored
	// (RFC 9113 sections 5.3.2 and 5.5).
	return nil
}

// lookup finds the stream a frame is for. A stream this side never opened
// is idle, and a frame on it a connection error (RFC 9113 section 5.1);
// nil with no error is a stream that has closed, whose late frames are
// ignored. Called with c.mu held.
func (c *Conn) lookup(h http2.FrameHeader) (*Stream, error) {
	if s := c.streams[h.StreamID]; s != nil {
		return s, nil
	}
	if h.StreamID%2 == 0 || h.StreamID >= c.nextID {
		return nil, connError{Code: http2.ErrCodeProtocol, Reason: fmt.Sprintf("%v on idle stream %d", h.Type, h.StreamID)}
	}
	return nil, nil
}

func (c *Conn) onData(f *http2.DataFrame) error {
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
	if s != nil {
		data, end := f.Data(), f.StreamEnded()
		// Beyond the stream's window (a stream error, so that one
		// stream's excess costs the connection's others nothing, and
		// what the stream received before stays readable) or after its
		// END_STREAM: h2core.Stream.CheckData.
		resetCode = s.core.CheckData(n, len(data), end)
		if resetCode == 0 && s.status == 0 {
			// DATA before the response's HEADERS is malformed (section 8.1).
			resetCode = http2.ErrCodeProtocol
		}
		if resetCode == 0 {
			refusal := !s.ok()
			if refusal {
				// A refusal's body is kept up to MaxBody for OpenWebSocket.
				room := min(c.cfg.MaxBody-len(s.body), len(data))
				s.body = append(s.body, data[:room]...)
				if len(s.body) >= c.cfg.MaxBody {
					s.respond()
				}
			}
			// Buffered for Read, or discarded with its window given
			// back when nobody reads any more (Close).
			buffered, inc := s.core.TakeData(n, data, end, refusal)
			c.buffered += buffered
			streamInc = inc
			if buffered > 0 || end {
				if end && refusal {
					s.respond()
				}
				s.wakeReader()
			}
			s.maybeEndLocked()
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
	c.sendFrames(func(fr *http2.Framer) error {
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
	return nil
}

func (c *Conn) onHeaders(f *http2.MetaHeadersFrame) error {
	c.mu.Lock()
	s, err := c.lookup(f.Header())
	if s == nil {
		c.mu.Unlock()
		return err
	}
	var resetCode http2.ErrCode
	var resetErr error
	switch {
	case f.Truncated:
		resetCode, resetErr = http2.ErrCodeCancel, ErrHeaderTooLarge
	case s.core.RemoteEnded:
		resetCode = http2.ErrCodeStreamClosed
	case s.status != 0:
		// Trailers: they must end the stream (RFC 9113 section 8.1).
		if !f.StreamEnded() {
			resetCode = http2.ErrCodeProtocol
			break
		}
		s.core.RemoteEnded = true
		if !s.ok() {
			s.respond()
		}
		s.wakeReader()
		s.maybeEndLocked()
	default:
		code, ok := parseStatus(f.PseudoValue("status"))
		switch {
		case !ok || code == 101:
			// No :status, or 101, which HTTP/2 does not use (section
			// 8.6): malformed (section 8.1.1).
			resetCode = http2.ErrCodeProtocol
		case code < 200:
			// Interim responses precede the final one and cannot end the
			// stream (section 8.1).
			if f.StreamEnded() {
				resetCode = http2.ErrCodeProtocol
			}
		default:
			s.status = code
			s.respHeader = fieldsToHeader(f.RegularFields())
			if f.StreamEnded() {
				s.core.RemoteEnded = true
			}
			if s.ok() || s.core.RemoteEnded {
				s.respond()
			}
			s.wakeReader()
			s.maybeEndLocked()
		}
	}
	c.mu.Unlock()
	if resetCode != 0 {
		c.resetStream(f.StreamID, resetCode, resetErr)
	}
	return nil
}

func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.lookup(f.Header())
	switch {
	case s == nil:
	case f.ErrCode == http2.ErrCodeNo && s.core.RemoteEnded:
		// A complete response, then a request to stop sending without
		// error: the response stands (RFC 9113 section 8.1).
		s.core.LocalEnded, s.core.EndSent = true, true
		s.finishLocked(nil)
	default:
		s.finishLocked(&StreamError{StreamID: s.id, Code: f.ErrCode, Remote: true})
	}
	return err
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
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
		c.mu.Unlock()
		return err
	}
	// A writer waiting for window of its own, or held at its
	// StreamSendLimit, may go on.
	overflow := c.send.StreamUpdate(s.writer(), f.Increment)
	c.mu.Unlock()
	if overflow {
		// A stream error (section 6.9.1).
		c.resetStream(s.id, http2.ErrCodeFlowControl, nil)
	}
	return nil
}

// onGoAway stops new streams; streams the node may have processed (at or
// below its last stream identifier) continue, the others were not and end
// with REFUSED_STREAM (RFC 9113 section 6.8).
func (c *Conn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.goAwayLocked()
	for id, s := range c.streams {
		if id > f.LastStreamID {
			s.finishLocked(&StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream, Remote: true})
		}
	}
}

// resetStream ends stream id with err (a *StreamError of code when nil)
// and queues RST_STREAM(code) (RFC 9113 section 5.4.2) for the flusher.
// Both happen under qmu, which startStream holds while it counts the open
// streams and queues a new stream's HEADERS: a stream leaves the count
// only once its RST_STREAM is queued ahead of any later HEADERS, so a new
// stream never exceeds the node's SETTINGS_MAX_CONCURRENT_STREAMS as the
// node counts (RFC 9113 section 5.1.2).
func (c *Conn) resetStream(id uint32, code http2.ErrCode, err error) {
	if err == nil {
		err = &StreamError{StreamID: id, Code: code}
	}
	c.qmu.Lock()
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		s.finishLocked(err)
	}
	c.mu.Unlock()
	c.q.QueueLocked(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
	c.qmu.Unlock()
	c.Kick()
}

// queueFrames runs write with the Framer under qmu: its frames join the
// queue, in order, for the next flush.
func (c *Conn) queueFrames(write func(fr *http2.Framer) error) error {
	return c.q.Queue(write)
}

// writeFrames queues write's frames and flushes: it returns once they are
// on the network, or the connection is lost.
func (c *Conn) writeFrames(write func(fr *http2.Framer) error) error {
	if err := c.queueFrames(write); err != nil {
		return err
	}
	return c.flush()
}

// answer queues write's frames, an answer to the node's, for the flusher
// goroutine, counted against maxAnswerBytes until they have left: past
// it, the node sends faster than it reads, and the connection is cut
// with the error returned (which ends the reader).
func (c *Conn) answer(write func(fr *http2.Framer) error) error {
	if err := c.q.Answer(write); err != nil {
		return err
	}
	c.Kick()
	return nil
}

// sendFrames queues write's frames for the flusher goroutine and returns
// at once; a failed write loses the connection there.
func (c *Conn) sendFrames(write func(fr *http2.Framer) error) {
	if c.queueFrames(write) == nil {
		c.Kick()
	}
}

// Kick has the connection's flusher goroutine write what is queued soon.
// It never blocks.
func (c *Conn) Kick() { c.q.Kick() }

// flushLoop is the connection's flusher: it writes what is queued each
// time it is kicked, until the connection ends.
func (c *Conn) flushLoop() {
	for {
		select {
		case <-c.q.Kicked():
			c.flush()
		case <-c.readDone:
			return
		}
	}
}

// flush has everything queued written (h2core.Queue.Flush: each 64 KiB
// within Config.WriteTimeout, a burst of flushes left to the last). A
// failed write loses the connection.
func (c *Conn) flush() error {
	if _, err := c.q.Flush(c.nc); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// fail ends the connection once: every stream ends with ErrConnLost (err
// itself if it is one) and the socket is closed, which stops the reader.
func (c *Conn) fail(err error) {
	if !errors.Is(err, ErrConnLost) {
		err = &connLostError{err}
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	held := c.holdLostLocked(err) // see herd.go
	for _, s := range c.streams {
		if s.held == nil {
			s.finishLocked(err)
		}
	}
	if c.stall != nil {
		c.stall.Stop()
		c.stall = nil
	}
	detach, set := c.detach, c.set
	c.mu.Unlock()
	if set != nil {
		set.noteEnd(err) // before any re-dial (backoff.go)
	}
	if len(held) > 0 {
		c.set.lost(held)
	}
	if detach != nil {
		detach() // the poller closes its descriptor (see PollDetached)
		c.pollEnded()
	}
	c.nc.Close()
}

// OpenWebSocket opens a stream with an extended CONNECT request for a
// WebSocket (RFC 8441 section 4) and waits, as long as ctx allows, for the
// node's response. A 2xx response gives an open Stream and the response;
// any other status gives no stream and the response with its status,
// fields and at most Config.MaxBody bytes of body, to be passed to the
// client. ErrFull says the node takes no more streams on this connection,
// ErrGoingAway that it takes none at all; a *StreamError with
// REFUSED_STREAM may be retried on another connection.
func (c *Conn) OpenWebSocket(ctx context.Context, req *Request) (*Stream, *Response, error) {
	if req.Authority == "" || req.Path == "" {
		return nil, nil, errors.New("h2: extended CONNECT needs :authority and :path (RFC 8441 section 4)")
	}
	s, err := c.startStream(req)
	if err != nil {
		return nil, nil, err
	}
	select {
	case <-s.responded:
	case <-ctx.Done():
		// Closed, not reset: the node may be working on the request,
		// and a reset would free the stream's place under its
		// MAX_CONCURRENT_STREAMS while its handler still runs; a node
		// that counts those (net/http does, against rapid resets, RFC
		// 9113 section 10.5) ends the connection, and every stream on
		// it, when there are many. Close ends this side and keeps the
		// stream counted until the node ends its own, or resets it
		// after Config.WriteTimeout.
		s.Close()
		return nil, nil, afterRequest{fmt.Errorf("h2: wait for the node's response: %w", ctx.Err())}
	}
	c.mu.Lock()
	err = s.core.Err
	if s.status != 0 && (s.core.RemoteEnded || s.ok() && s.core.Buffered() > 0) {
		// A response came, and the node's first bytes or its end: what
		// ended the stream after them is the stream's to report (an
		// open WebSocket's Read returns what the node sent first, a
		// close frame right after the upgrade included).
		err = nil
	}
	resp := &Response{Status: s.status, Header: s.respHeader, Body: s.body}
	// The response is the caller's now: an open stream keeps none of it.
	s.body, s.respHeader, s.responded = nil, nil, nil
	c.mu.Unlock()
	if err != nil {
		return nil, nil, afterRequest{err}
	}
	if !s.ok() {
		s.Abort()
		return nil, resp, nil
	}
	return s, resp, nil
}

// startStream queues the request's HEADERS on a new stream for the
// flusher. It does not write them itself: a write under way (a stalled
// node's, up to Config.WriteTimeout) would hold it past the context that
// bounds OpenWebSocket's wait; that wait covers the write.
func (c *Conn) startStream(req *Request) (*Stream, error) {
	s, err := c.queueStream(req)
	if err != nil {
		return nil, err
	}
	c.Kick()
	return s, nil
}

// queueStream registers a new stream and queues its HEADERS, under qmu.
func (c *Conn) queueStream(req *Request) (*Stream, error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if err := c.q.ErrLocked(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	switch {
	case c.err != nil:
		err := c.err
		c.mu.Unlock()
		return nil, err
	case c.goAway || c.nextID > maxWindow:
		c.mu.Unlock()
		return nil, ErrGoingAway
	case uint32(len(c.streams)) >= c.peer.MaxConcurrentStreams:
		c.mu.Unlock()
		return nil, ErrFull
	case c.peer.MaxHeaderListSize > 0 && headerListSize(req, schemeOf(c.nc)) > uint64(c.peer.MaxHeaderListSize):
		c.mu.Unlock()
		return nil, ErrRequestTooLarge
	}
	s := &Stream{
		c:         c,
		id:        c.nextID,
		responded: make(chan struct{}),
	}
	s.core.Init(c.cfg.StreamWindow, -1)
	c.nextID += 2
	c.streams[s.id] = s
	maxFrame := c.peerFrame
	table := c.pendingTable
	c.pendingTable = nil
	c.mu.Unlock()

	if table != nil {
		c.henc.SetMaxDynamicTableSizeLimit(*table)
	}
	c.hbuf.Reset()
	encodeRequest(c.henc, req, schemeOf(c.nc))
	block := c.hbuf.Bytes()
	err := func(fr *http2.Framer) error {
		// A header block larger than a frame continues in CONTINUATION
		// frames, with nothing in between (RFC 9113 section 4.3).
		first := block[:min(len(block), int(maxFrame))]
		rest := block[len(first):]
		if err := fr.WriteHeaders(http2.HeadersFrameParam{
			StreamID:      s.id,
			BlockFragment: first,
			EndHeaders:    len(rest) == 0,
		}); err != nil {
			return err
		}
		for len(rest) > 0 {
			frag := rest[:min(len(rest), int(maxFrame))]
			rest = rest[len(frag):]
			if err := fr.WriteContinuation(s.id, len(rest) == 0, frag); err != nil {
				return err
			}
		}
		return nil
	}(c.fr)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// afterRequest marks an error of OpenWebSocket after the request was
// sent: the node may have seen it, so it is not retried on another
// connection (a request that makes a node end the connection would
// otherwise end one connection per try).
type afterRequest struct{ error }

func (e afterRequest) Unwrap() error { return e.error }

// Ping sends a PING and waits for its acknowledgement (RFC 9113 section
// 6.7): the round trip, for keepalive and for detecting a silent node.
// ctx's deadline is measured from when the PING left (as long as ctx
// gave at the call), not from the call: a PING behind a backlog that is
// still draining is not late.
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.pingSeq++
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], c.pingSeq)
	ch := make(chan struct{})
	c.pings[data] = ch
	c.mu.Unlock()
	defer func() { // the ACK's reader deletes it too; either way it goes
		c.mu.Lock()
		delete(c.pings, data)
		c.mu.Unlock()
	}()
	// ctx's time is for the answer, counted from when the PING left: it
	// queues behind what was queued before it (up to the connection's
	// send window of DATA), which a node that reads slowly but steadily
	// takes longer than a ping interval to drain, and the write's own
	// deadlines already bound that (one Config.WriteTimeout per chunk).
	var wait time.Duration
	dl, timed := ctx.Deadline()
	if timed {
		wait = time.Until(dl)
	}
	if err := c.writeFrames(func(fr *http2.Framer) error { return fr.WritePing(false, data) }); err != nil {
		return 0, err
	}
	sent := time.Now()
	done := ctx.Done()
	var expired <-chan time.Time
	if timed {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case <-ch:
			return time.Since(sent), nil
		case <-c.readDone:
			return 0, c.Err()
		case <-done:
			if timed && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				done = nil // the timer from the PING's departure decides
				continue
			}
			return 0, fmt.Errorf("h2: ping: %w", ctx.Err())
		case <-expired:
			return 0, fmt.Errorf("h2: ping: no answer within %v of its departure: %w", wait, context.DeadlineExceeded)
		}
	}
}

// Stats is what a Conn holds at one moment.
type Stats struct {
	// Streams counts open streams, those that count against the node's
	// SETTINGS_MAX_CONCURRENT_STREAMS.
	Streams int
	// Buffered is the bytes received on streams and not yet read.
	Buffered int
}

// Stats returns the connection's counts.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Streams: len(c.streams), Buffered: c.buffered}
}

// Err returns nil while the connection is up, then why it ended (an error
// matching ErrConnLost).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed once the connection has ended and its reader returned.
func (c *Conn) Done() <-chan struct{} { return c.readDone }

// Close sends GOAWAY (unless a write is under way) and closes the
// connection; open streams end with ErrConnLost.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.goAwayLocked()
	c.mu.Unlock()
	// The GOAWAY is a courtesy: it goes only if no write is under way (a
	// stalled one would hold Close for its write timeout before this
	// one's own); closing the socket ends a stalled write at once.
	// One WriteTimeout for all: Close does not wait for a slow node to
	// take a backlog.
	c.q.FlushNow(c.nc, c.cfg.WriteTimeout, func(fr *http2.Framer) error { return fr.WriteGoAway(0, http2.ErrCodeNo, nil) })
	c.fail(errors.New("closed by the gateway"))
	<-c.readDone
	return nil
}

// Shutdown stops new streams, waits as long as ctx allows for the open
// ones to end, then closes the connection.
func (c *Conn) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	c.goAwayLocked()
	c.mu.Unlock()
	for {
		c.mu.Lock()
		n := len(c.streams)
		c.mu.Unlock()
		if n == 0 {
			return c.Close()
		}
		select {
		case <-c.gone:
		case <-c.readDone:
			return c.Close()
		case <-ctx.Done():
			c.Close()
			return fmt.Errorf("h2: shutdown with %d streams open: %w", n, ctx.Err())
		}
	}
}

// goAwayLocked stops new streams, once: GOAWAY received, or Close or
// Shutdown called.
func (c *Conn) goAwayLocked() {
	if !c.goAway {
		c.goAway = true
		close(c.away)
	}
}

// GoingAway is closed once the connection takes no new stream: the node
// sent GOAWAY, or Close or Shutdown was called. Its open streams go on.
func (c *Conn) GoingAway() <-chan struct{} { return c.away }

// armStallLocked starts the stall timer, unless it runs: a stream waits
// for connection window. Called with c.mu held.
func (c *Conn) armStallLocked() {
	if c.stall != nil || c.err != nil || c.send.ConnWaiters() == 0 {
		return
	}
	from := c.send.Credited()
	c.stall = time.AfterFunc(c.cfg.StallTimeout, func() { c.stalled(from) })
}

// stalled runs StallTimeout after a stream was found waiting for the
// connection's send window. When the window is spent still, the node has
// given none of it back since (counted from from), and a stream waits
// other than the one holding the most uncredited bytes, that one is reset
// (its client gets the gateway's close), which a node gives the
// connection's window back for: a node slow to read is waited for, and a
// stream alone on its connection is never reset for its own node's pace.
// The timer is armed again while streams wait.
func (c *Conn) stalled(from uint64) {
	c.mu.Lock()
	c.stall = nil
	if c.err != nil || c.send.Window() > 0 || c.send.ConnWaiters() == 0 {
		c.mu.Unlock()
		return
	}
	var worst *Stream
	if c.send.Credited() == from {
		for _, s := range c.streams {
			if u := c.send.Uncredited(s.writer()); !s.core.Ended && u > 0 && (worst == nil || u > c.send.Uncredited(worst.writer())) {
				worst = s
			}
		}
		if worst != nil && c.send.ConnWaiters() == 1 && c.send.WaitsForConn(worst.writer()) {
			worst = nil // the only one waiting is the one that holds it
		}
	}
	c.armStallLocked()
	c.mu.Unlock()
	if worst != nil {
		c.resetStream(worst.id, http2.ErrCodeCancel, ErrStalled)
	}
}
