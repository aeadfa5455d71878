package h2serve

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// defaultMaxFrameSize is SETTINGS_MAX_FRAME_SIZE's initial value; this
	// side never raises what it accepts (RFC 9113 section 6.5.2).
	defaultMaxFrameSize = 16384
	// defaultWindow is the initial flow-control window of a connection and
	// of every stream (RFC 9113 section 6.9.2).
	defaultWindow = 65535
	// maxWindow is the largest flow-control window (RFC 9113 section 6.9.1).
	maxWindow = 1<<31 - 1
	// headerTableSize is the hpack dynamic table this side decodes with,
	// SETTINGS_HEADER_TABLE_SIZE's initial value, never changed.
	headerTableSize = 4096
	// keepOutCap is the largest write buffer a connection keeps between
	// writes.
	keepOutCap = 256 << 10
	// maxAnswerBytes bounds the frames queued in answer to the peer (PING
	// and SETTINGS acknowledgements, resets) until they are written: a
	// peer that sends them faster than it reads is flooding, and is cut
	// off with ENHANCE_YOUR_CALM (h2core.Queue.AnswerLocked).
	maxAnswerBytes = 1 << 20
	// controlBurst and controlRefill are a connection's budget of frames
	// that do no work (see conn.ctrl, an h2core.ControlBudget): a burst, and a refill a
	// second that keeps any keepalive PING of an idle connection free.
	controlBurst  = 1000
	controlRefill = 100
	// recentResets is how many of the streams this side reset a
	// connection remembers, to ignore what the client sent on them
	// before it saw the reset.
	recentResets = 64
)

// Server serves HTTP/2 connections whose preface has been read (see
// Listener and Sniff). Set its fields before the first ServeConn; it is
// safe for concurrent use and must not be copied.
type Server struct {
	// Handler is called on a goroutine of its own for each request
	// stream, once its header block is in. It answers with Respond, or
	// with WriteHeader and then Write and Read on the stream (a 2xx to an
	// extended CONNECT opens a tunnel, RFC 8441 section 5). The stream is
	// closed when Handler returns. Required.
	Handler func(*Stream)
	// MaxConcurrentStreams is advertised as SETTINGS_MAX_CONCURRENT_STREAMS;
	// a stream beyond it is refused with RST_STREAM(REFUSED_STREAM)
	// (default 1000).
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a decoded request header block (hpack field
	// sizes), advertised as SETTINGS_MAX_HEADER_LIST_SIZE; a larger one is
	// answered 431 (default 16 KiB, in bytes).
	MaxHeaderListSize uint32
	// StreamWindow is each stream's receive window, advertised as
	// SETTINGS_INITIAL_WINDOW_SIZE: the most a client may send on a stream
	// before its reader consumes it, so the most buffered per stream
	// (default and minimum 65,535 bytes, the protocol's initial value, so
	// that no stream opened before the client acknowledges the setting is
	// sent more than it allows).
	StreamWindow uint32
	// ConnWindow is the connection's receive window (default 1 MiB, in
	// bytes). Received DATA is credited back to it as soon as a stream
	// buffered it, since StreamWindow bounds each stream's buffer, so a
	// stream whose reader stopped does not hold up the others.
	ConnWindow uint32
	// WriteTimeout bounds every write to the network, of at most 64 KiB
	// (a connection that cannot take one within it is closed), and how
	// long a closed stream waits for the client to end its side before it
	// is reset (default 10s).
	WriteTimeout time.Duration
	// WriteQueue bounds the DATA a connection queues for its writer: a
	// Write waits, within its write deadline, while the queue holds this
	// many bytes or more, as a write to a TCP socket whose buffer is full
	// waits, so a client that reads slowly (or never) holds back the
	// streams that write to it rather than having the server hold what
	// they write. The queue holds at most this plus one frame from each
	// stream writing (default 256 KiB).
	WriteQueue int
	// IdleTimeout closes a connection, after GOAWAY(NO_ERROR), once it
	// has had no stream for this long, so an idle client does not hold
	// its connection for good (default 0: never).
	IdleTimeout time.Duration
	// Malformed, when set, is called with the reason each time a
	// request's header block is malformed (RFC 9113 section 8.1.1: a
	// pseudo-header missing, a field HTTP/2 forbids, content-length
	// fields that disagree...), whose stream is reset with PROTOCOL_ERROR
	// and never reaches Handler, so that the user can count it as the
	// client's bad request. It runs on the connection's reader: it must
	// return at once.
	Malformed func(reason string)

	mu        sync.Mutex
	conns     map[*conn]struct{}
	closed    bool
	goingAway bool // Drain was called: every connection gets GOAWAY
	frames    atomic.Uint64
	writes    atomic.Uint64
	streamsUp atomic.Int64
	opened    atomic.Uint64
	refused   atomic.Uint64
	// windowWork counts the streams visited or woken because a send
	// window changed (SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_UPDATE, a
	// reservation given back): what a control frame costs.
	windowWork atomic.Uint64
	// ctrlBurst, when above 0, replaces controlBurst (tests).
	ctrlBurst int

	// writeTimeout, when above 0, is WriteTimeout as SetWriteTimeout set
	// it.
	writeTimeout atomic.Int64
}

// ErrServerClosed is returned by ServeConn after Close.
var ErrServerClosed = errors.New("h2serve: server closed")

// settings are a Server's fields with their defaults applied.
type settings struct {
	maxStreams   uint32
	maxHeader    uint32
	streamWindow uint32
	connWindow   uint32
	writeTimeout time.Duration
	writeQueue   int
	idleTimeout  time.Duration
}

func (s *Server) settings() settings {
	c := settings{
		maxStreams:   s.MaxConcurrentStreams,
		maxHeader:    s.MaxHeaderListSize,
		streamWindow: min(max(s.StreamWindow, defaultWindow), maxWindow),
		connWindow:   s.ConnWindow,
		writeTimeout: s.WriteTimeout,
		writeQueue:   s.WriteQueue,
		idleTimeout:  s.IdleTimeout,
	}
	if c.writeQueue <= 0 {
		c.writeQueue = 256 << 10
	}
	if c.maxStreams == 0 {
		c.maxStreams = 1000
	}
	if c.maxHeader == 0 {
		c.maxHeader = 16 << 10
	}
	if c.connWindow < defaultWindow {
		c.connWindow = 1 << 20
	}
	c.connWindow = min(c.connWindow, maxWindow)
	if d := time.Duration(s.writeTimeout.Load()); d > 0 {
		c.writeTimeout = d
	}
	if c.writeTimeout <= 0 {
		c.writeTimeout = 10 * time.Second
	}
	return c
}

// SetWriteTimeout replaces WriteTimeout for the connections served from
// now on (those being served keep theirs). Unlike an assignment to the
// field, it may be called while the server serves: for a configuration
// reload.
func (s *Server) SetWriteTimeout(d time.Duration) {
	s.writeTimeout.Store(int64(d))
}

// ServeConn serves one connection whose client preface has been read,
// until the connection ends; it closes nc. It returns nil when the client
// closed the connection or it closed after GoAway, and the error
// otherwise.
func (s *Server) ServeConn(nc net.Conn) error {
	c := newConn(s, nc)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return ErrServerClosed
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	c.goAwayFirst = s.goingAway
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	err := c.serve()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	return err
}

// ServeNegotiated serves one connection on which HTTP/2 was negotiated
// (TLS with ALPN "h2", RFC 9113 section 3.2), so the client preface comes
// next: it reads that within prefaceTimeout, then serves as ServeConn. A
// connection that does not start with the preface is closed without a
// frame (a client that chose h2 and then speaks something else is not
// one to argue with) and its error returned.
func (s *Server) ServeNegotiated(nc net.Conn, prefaceTimeout time.Duration) error {
	if err := readPreface(nc, prefaceTimeout); err != nil {
		_ = nc.Close()
		return err
	}
	return s.ServeConn(nc)
}

// GoAway sends GOAWAY(NO_ERROR) on every connection (RFC 9113 section
// 6.8): the streams already opened go on, new ones are refused, and each
// connection closes once its last stream has ended. Connections accepted
// later are served as usual.
func (s *Server) GoAway() {
	for _, c := range s.snapshot() {
		c.goAway()
	}
}

// Drain is GoAway for a server that takes no more work: every connection
// served from now on gets GOAWAY(NO_ERROR) too, right after the server's
// SETTINGS, and none of its streams is served. Those are connections
// accepted before the listener stopped whose client preface was still
// on its way, which GoAway alone would serve as usual.
func (s *Server) Drain() {
	s.mu.Lock()
	s.goingAway = true
	s.mu.Unlock()
	s.GoAway()
}

// Close closes every connection now, after a GOAWAY(NO_ERROR) that gets
// WriteTimeout to leave, and refuses new ones; every stream fails.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, c := range s.snapshot() {
		c.close()
	}
	return nil
}

func (s *Server) snapshot() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		list = append(list, c)
	}
	return list
}

// Stats counts a Server's work since it started.
type Stats struct {
	// Conns is the number of connections being served.
	Conns int
	// Streams is the number of streams open now.
	Streams int64
	// Writes is the number of network writes made.
	Writes uint64
	// Frames is the number of frames those writes carried.
	Frames uint64
	// Opened is the number of streams opened (their Handler called, or
	// their request refused with a status).
	Opened uint64
	// Refused is the number of streams refused with
	// RST_STREAM(REFUSED_STREAM): over MaxConcurrentStreams, or after
	// GOAWAY.
	Refused uint64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return Stats{Conns: n, Streams: s.streamsUp.Load(), Writes: s.writes.Load(), Frames: s.frames.Load(),
		Opened: s.opened.Load(), Refused: s.refused.Load()}
}
