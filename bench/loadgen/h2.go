package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/wsgate/wsgate/internal/pollread"
)

// DefaultH2Streams is how many WebSockets an HTTP/2 connection of an
// H2Pool carries when NewH2Pool is given 0.
const DefaultH2Streams = 100

// Flow control of the client side. A stream's unread data is bounded by
// its window (h2StreamWindow), which the client gives back as ReadLoop
// consumes it, so a member that does not read (fanout's frozen ones)
// stops its stream as a full socket stops a TCP connection, and a
// connection buffers at most streams × h2StreamWindow. The connection's
// window is opened wide once and given back as data arrives.
const (
	h2StreamWindow   = 64 << 10
	h2StreamUpdateAt = 16 << 10
	h2ConnWindow     = 1 << 30
	h2ConnUpdateAt   = 1 << 20
	// h2CloseWait is how long a stream the client ended waits for the
	// server's END_STREAM before it is reset.
	h2CloseWait = 2 * time.Second
)

// H2Pool opens WebSockets as extended CONNECT streams (RFC 8441) of a
// few HTTP/2 connections: a new connection when every open one carries
// its share of streams (or got a GOAWAY). It is wsload's own client, not
// internal/h2client (a client for tests that gives window back on
// receipt, keeps what it was sent without a bound and wakes every
// stream on every frame): here a stream's unread data is bounded by its
// window, only the stream a frame is for wakes, a stream that ends
// leaves its connection's table, writes have deadlines, and an idle
// stream holds no buffer. It is safe for concurrent use.
type H2Pool struct {
	streams int

	mu    sync.Mutex
	conns map[string][]*h2Conn // by target (address, host, TLS)
}

// NewH2Pool returns a pool whose connections carry up to streams
// WebSockets each (DefaultH2Streams for 0), fewer when the server's
// SETTINGS_MAX_CONCURRENT_STREAMS says so.
func NewH2Pool(streams int) *H2Pool {
	if streams <= 0 {
		streams = DefaultH2Streams
	}
	return &H2Pool{streams: streams, conns: map[string][]*h2Conn{}}
}

// Close closes every connection of the pool (their streams end with
// them). The pool stays usable: the next dial opens a new connection.
func (p *H2Pool) Close() {
	p.mu.Lock()
	var all []*h2Conn
	for _, cs := range p.conns {
		all = append(all, cs...)
	}
	p.conns = map[string][]*h2Conn{}
	p.mu.Unlock()
	for _, c := range all {
		<-c.ready
		c.fail(net.ErrClosed)
	}
}

// h2Conn is one HTTP/2 connection of a pool.
type h2Conn struct {
	pool  *H2Pool
	key   string
	ready chan struct{} // closed once started (or failed to)
	// Set before ready is closed:
	nc       net.Conn
	tls      *TransportTLS
	startErr error
	fr       *http2.Framer

	// Under pool.mu:
	reserved int  // streams open or being opened
	dead     bool // GOAWAY or gone: no new streams

	wmu  sync.Mutex // the Framer's writes and the encoder
	henc *hpack.Encoder
	hbuf bytes.Buffer

	mu           sync.Mutex
	streams      map[uint32]*h2Stream
	nextID       uint32
	sendWindow   int64
	peerWindow   int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame    int   // the server's SETTINGS_MAX_FRAME_SIZE
	peerStreams  int   // the server's SETTINGS_MAX_CONCURRENT_STREAMS (0: none said)
	connectProto bool  // the server's SETTINGS_ENABLE_CONNECT_PROTOCOL
	recvOwed     uint32
	blocked      map[*h2Stream]struct{} // writers waiting for connection window
	err          error
	done         chan struct{} // closed when the reader returned
}

// dial opens a stream for t, on a connection with room or a new one.
func (p *H2Pool) dial(ctx context.Context, d *Dialer, t Target) (*Conn, error) {
	c, fresh, err := p.reserve(ctx, d, t)
	if err != nil {
		return nil, err
	}
	s, status, hdr, err := c.open(ctx, t, d.Protocol, d.Header)
	if err != nil {
		return nil, err
	}
	if status != 200 {
		s.Abort()
		return nil, &DialError{Reason: "http_" + strconv.Itoa(status), Status: status, Err: fmt.Errorf("extended CONNECT answered %d", status)}
	}
	conn := &Conn{nc: s, local: c.nc.LocalAddr(), hardClose: s.Abort, TLS: c.tls, Fresh: fresh}
	conn.Protocol = hdr["sec-websocket-protocol"]
	if conn.Protocol != "" && conn.Protocol != d.Protocol {
		s.Abort()
		return nil, &DialError{Reason: ReasonHandshake, Err: fmt.Errorf("server selected subprotocol %q, not offered", conn.Protocol)}
	}
	conn.reader = pollread.NewReader(s, readPool)
	return conn, nil
}

// reserve returns a started connection to t with a stream slot taken for
// the caller, starting a new one when none has room; fresh is set when
// this call started it. A slot taken on a connection still starting is
// given up again if the server's SETTINGS_MAX_CONCURRENT_STREAMS turns
// out lower than the slots taken, and another is looked for.
func (p *H2Pool) reserve(ctx context.Context, d *Dialer, t Target) (*h2Conn, bool, error) {
	key := t.Addr + " " + t.Host + " " + strconv.FormatBool(t.TLS)
	for ctx.Err() == nil {
		p.mu.Lock()
		var c *h2Conn
		for _, x := range p.conns[key] {
			if !x.dead && x.reserved < x.limit() {
				c = x
				break
			}
		}
		if c == nil {
			c = &h2Conn{pool: p, key: key, ready: make(chan struct{}), reserved: 1}
			p.conns[key] = append(p.conns[key], c)
			p.mu.Unlock()
			c.startErr = c.start(ctx, d, t)
			close(c.ready)
			if c.startErr != nil {
				p.drop(c)
				p.release(c)
				return nil, false, c.startErr
			}
			return c, true, nil
		}
		c.reserved++
		p.mu.Unlock()
		select {
		case <-c.ready:
		case <-ctx.Done():
			p.release(c)
			return nil, false, &DialError{Reason: ReasonTimeout, Err: fmt.Errorf("wait for the HTTP/2 connection to %s: %w", t.Addr, ctx.Err())}
		}
		if c.startErr != nil {
			p.release(c)
			return nil, false, c.startErr
		}
		p.mu.Lock()
		over := c.reserved > c.limit()
		p.mu.Unlock()
		if !over {
			return c, false, nil
		}
		p.release(c)
	}
	return nil, false, &DialError{Reason: ReasonTimeout, Err: fmt.Errorf("find an HTTP/2 connection to %s: %w", t.Addr, ctx.Err())}
}

// limit is how many streams c may carry; call with pool.mu held.
func (c *h2Conn) limit() int {
	n := c.pool.streams
	select {
	case <-c.ready:
		c.mu.Lock()
		if c.peerStreams > 0 {
			n = min(n, c.peerStreams)
		}
		c.mu.Unlock()
	default:
	}
	return n
}

// release gives back a stream slot of c, and closes c when it was the
// last of a connection that takes no new streams (a GOAWAY, or its stream
// identifiers used up).
func (p *H2Pool) release(c *h2Conn) {
	p.mu.Lock()
	c.reserved--
	retired := c.dead && c.reserved == 0
	p.mu.Unlock()
	if retired {
		c.fail(errRetired)
	}
}

// errRetired ends a connection whose last stream ended after it stopped
// taking new ones.
var errRetired = errors.New("HTTP/2 connection retired")

// maxStreamID is the last client stream identifier a connection may use.
const maxStreamID = 1<<31 - 1

// drop takes c out of the pool: it opens no more streams.
func (p *H2Pool) drop(c *h2Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.dead = true
	cs := p.conns[c.key]
	for i, x := range cs {
		if x == c {
			p.conns[c.key] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(p.conns[c.key]) == 0 {
		delete(p.conns, c.key)
	}
}

// start connects, sends the preface, SETTINGS and a connection window,
// and reads the server's SETTINGS.
func (c *h2Conn) start(ctx context.Context, d *Dialer, t Target) error {
	tcp, tc, err := d.connect(ctx, t, "h2")
	if err != nil {
		return err
	}
	c.nc = tcp
	if tc != nil {
		c.nc, c.tls = tc, transportTLS(tc)
		if c.tls.ALPN != "h2" {
			_ = tcp.Close()
			return &DialError{Reason: ReasonTLS, Err: fmt.Errorf("-h2: %s chose ALPN %q, not h2 (a wsgate TLS listener needs h2 = true)", t.Addr, c.tls.ALPN)}
		}
	}
	fail := func(what string, err error) error {
		_ = tcp.Close()
		return &DialError{Reason: timeoutOr(err, ReasonHandshake), Err: fmt.Errorf("-h2: %s %s: %w", what, t.Addr, err)}
	}
	c.streams = map[uint32]*h2Stream{}
	c.blocked = map[*h2Stream]struct{}{}
	c.nextID = 1
	c.sendWindow, c.peerWindow, c.peerFrame = 65535, 65535, 16384
	c.done = make(chan struct{})
	c.fr = http2.NewFramer(c.nc, bufio.NewReaderSize(c.nc, 4096))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 16 << 10
	c.henc = hpack.NewEncoder(&c.hbuf)
	deadline, _ := ctx.Deadline()
	_ = c.nc.SetDeadline(deadline)
	if _, err := io.WriteString(c.nc, http2.ClientPreface); err != nil {
		return fail("write the preface to", err)
	}
	if err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
	); err != nil {
		return fail("write SETTINGS to", err)
	}
	if err := c.fr.WriteWindowUpdate(0, h2ConnWindow-65535); err != nil {
		return fail("write WINDOW_UPDATE to", err)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		if !t.TLS {
			err = fmt.Errorf("%w (-h2 over ws:// speaks cleartext HTTP/2 with prior knowledge, as relay-backend's port does; wsgate speaks HTTP/2 on a TLS listener with h2 = true: use wss://)", err)
		}
		return fail("read SETTINGS from", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fail("read SETTINGS from", fmt.Errorf("first frame %v", f.Header()))
	}
	c.settings(sf)
	if !c.connectProto {
		return fail("open a WebSocket on", errors.New("the server does not allow extended CONNECT (no SETTINGS_ENABLE_CONNECT_PROTOCOL)"))
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		return fail("acknowledge SETTINGS of", err)
	}
	_ = c.nc.SetDeadline(time.Time{})
	go c.readLoop()
	return nil
}

// settings applies a SETTINGS frame of the server.
func (c *h2Conn) settings(f *http2.SettingsFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = f.ForeachSetting(func(st http2.Setting) error {
		switch st.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(st.Val) - c.peerWindow
			c.peerWindow = int64(st.Val)
			for _, s := range c.streams {
				s.sendWindow += delta
				s.signal(s.wnotify)
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(st.Val)
		case http2.SettingMaxConcurrentStreams:
			c.peerStreams = int(min(st.Val, 1<<20))
		case http2.SettingEnableConnectProtocol:
			c.connectProto = st.Val == 1
		}
		return nil
	})
}

// write runs w with the Framer under the write lock, bounded by deadline
// (DefaultTimeout from now when zero). A failed write ends the
// connection: a frame may be half written.
func (c *h2Conn) write(deadline time.Time, w func(fr *http2.Framer) error) error {
	if deadline.IsZero() {
		deadline = time.Now().Add(DefaultTimeout)
	}
	c.wmu.Lock()
	_ = c.nc.SetWriteDeadline(deadline)
	err := w(c.fr)
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("write: %w", err))
	}
	return err
}

// open sends the extended CONNECT for t and waits for the response
// HEADERS: the stream, its status and its fields (lowercase names). It
// releases the slot reserve took when it fails.
func (c *h2Conn) open(ctx context.Context, t Target, protocol string, extra []Header) (*h2Stream, int, map[string]string, error) {
	scheme := "http"
	if t.TLS {
		scheme = "https"
	}
	c.wmu.Lock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.wmu.Unlock()
		c.pool.release(c)
		return nil, 0, nil, &DialError{Reason: ReasonDial, Err: fmt.Errorf("-h2: connection to %s: %w", t.Addr, err)}
	}
	s := &h2Stream{c: c, id: c.nextID, sendWindow: c.peerWindow, notify: make(chan struct{}, 1), wnotify: make(chan struct{}, 1)}
	c.nextID += 2
	c.streams[s.id] = s
	frame := c.peerFrame
	usedUp := c.nextID > maxStreamID
	c.mu.Unlock()
	if usedUp {
		c.pool.drop(c) // the streams it carries stay; new ones go elsewhere
	}
	c.hbuf.Reset()
	field := func(k, v string) { _ = c.henc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	field(":method", "CONNECT")
	field(":protocol", "websocket")
	field(":scheme", scheme)
	field(":authority", t.Host)
	field(":path", t.Path)
	field("sec-websocket-version", "13")
	if protocol != "" {
		field("sec-websocket-protocol", protocol)
	}
	for _, h := range extra {
		field(strings.ToLower(h.Name), h.Value)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultTimeout)
	}
	_ = c.nc.SetWriteDeadline(deadline)
	block := c.hbuf.Bytes()
	first := block[:min(len(block), frame)]
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: first, EndHeaders: len(first) == len(block)})
	for rest := block[len(first):]; err == nil && len(rest) > 0; {
		n := min(len(rest), frame)
		err = c.fr.WriteContinuation(s.id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("write: %w", err))
		c.forget(s)
		return nil, 0, nil, &DialError{Reason: timeoutOr(err, ReasonDial), Err: fmt.Errorf("-h2: send CONNECT to %s: %w", t.Addr, err)}
	}
	for {
		c.mu.Lock()
		status, hdr, serr := s.status, s.header, s.err
		c.mu.Unlock()
		if status != 0 {
			return s, status, hdr, nil
		}
		if serr != nil {
			s.Abort()
			return nil, 0, nil, &DialError{Reason: ReasonHandshake, Err: fmt.Errorf("-h2: %s: %w", t.Addr, serr)}
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			s.Abort()
			return nil, 0, nil, &DialError{Reason: ReasonTimeout, Err: fmt.Errorf("-h2: no response from %s: %w", t.Addr, ctx.Err())}
		}
	}
}

// forget takes s out of the stream table (once) and gives back its slot.
func (c *h2Conn) forget(s *h2Stream) bool {
	c.mu.Lock()
	_, ok := c.streams[s.id]
	if ok {
		delete(c.streams, s.id)
		delete(c.blocked, s)
	}
	c.mu.Unlock()
	if ok {
		c.pool.release(c)
	}
	return ok
}

// fail ends the connection with err: every stream fails with it.
func (c *h2Conn) fail(err error) {
	c.pool.drop(c)
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	streams := make([]*h2Stream, 0, len(c.streams))
	for _, s := range c.streams {
		if s.err == nil {
			s.err = err
		}
		streams = append(streams, s)
	}
	c.mu.Unlock()
	if c.nc != nil {
		_ = c.nc.Close()
	}
	for _, s := range streams {
		s.wake()
		c.forget(s)
	}
}

func (c *h2Conn) readLoop() {
	defer close(c.done)
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.handle(f)
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// handle applies one frame from the server.
func (c *h2Conn) handle(f http2.Frame) error {
	id := f.Header().StreamID
	c.mu.Lock()
	s := c.streams[id]
	c.mu.Unlock()
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.data(s, f)
	case *http2.MetaHeadersFrame:
		if s == nil {
			return nil
		}
		c.mu.Lock()
		if s.status == 0 {
			if st, err := strconv.Atoi(f.PseudoValue("status")); err == nil && st >= 200 {
				s.status = st
				s.header = map[string]string{}
				for _, hf := range f.RegularFields() {
					s.header[hf.Name] = hf.Value
				}
			}
		}
		ended := f.StreamEnded() && c.remoteEnd(s)
		c.mu.Unlock()
		s.wake()
		if ended {
			c.forget(s)
		}
	case *http2.RSTStreamFrame:
		if s == nil {
			return nil
		}
		c.mu.Lock()
		if s.err == nil {
			s.err = fmt.Errorf("stream reset by the server: %v", f.ErrCode)
		}
		c.mu.Unlock()
		s.wake()
		c.forget(s)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		c.settings(f)
		return c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
	case *http2.WindowUpdateFrame:
		c.mu.Lock()
		if id == 0 {
			c.sendWindow += int64(f.Increment)
			for b := range c.blocked {
				b.signal(b.wnotify)
			}
			clear(c.blocked)
		} else if s != nil {
			s.sendWindow += int64(f.Increment)
			s.signal(s.wnotify)
		}
		c.mu.Unlock()
	case *http2.PingFrame:
		if !f.IsAck() {
			data := f.Data
			return c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WritePing(true, data) })
		}
	case *http2.GoAwayFrame:
		// No new streams here; those the server did not take failed.
		c.pool.drop(c)
		var refused []*h2Stream
		c.mu.Lock()
		for sid, st := range c.streams {
			if sid > f.LastStreamID {
				if st.err == nil {
					st.err = fmt.Errorf("GOAWAY (%v) before the server took the stream", f.ErrCode)
				}
				refused = append(refused, st)
			}
		}
		c.mu.Unlock()
		for _, st := range refused {
			st.wake()
			c.forget(st)
		}
	}
	return nil
}

// remoteEnd marks s ended by the server; it reports whether both sides
// have now ended it. Call with c.mu held.
func (c *h2Conn) remoteEnd(s *h2Stream) bool {
	s.remoteEnded = true
	return s.sentEnd
}

// data stores a DATA frame's payload for its stream's reader and gives
// the connection window back in large steps.
func (c *h2Conn) data(s *h2Stream, f *http2.DataFrame) error {
	n := f.Header().Length
	c.mu.Lock()
	c.recvOwed += n
	owed := uint32(0)
	if c.recvOwed >= h2ConnUpdateAt {
		owed, c.recvOwed = c.recvOwed, 0
	}
	ended := false
	var err error
	if s != nil && !s.closed {
		switch {
		case len(s.rbuf)+len(f.Data()) > h2StreamWindow:
			err = fmt.Errorf("stream %d: the server sent beyond its window", s.id)
		default:
			s.rbuf = append(s.rbuf, f.Data()...)
		}
	}
	if s != nil && f.StreamEnded() {
		ended = c.remoteEnd(s)
	}
	c.mu.Unlock()
	if s != nil {
		s.wake()
	}
	if ended {
		c.forget(s)
	}
	if err != nil {
		return err
	}
	if owed > 0 {
		return c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, owed) })
	}
	return nil
}

// h2Stream is one WebSocket of an h2Conn: a net.Conn over its DATA, and
// a pollread.Waiter, so that ReadLoop takes a buffer only once data is
// there.
type h2Stream struct {
	c       *h2Conn
	id      uint32
	notify  chan struct{} // reader wake-ups (data, end, deadline change)
	wnotify chan struct{} // writer wake-ups (window)

	// Under c.mu:
	status      int
	header      map[string]string
	rbuf        []byte // unread DATA, at most h2StreamWindow; nil while idle
	unacked     int    // bytes read and not yet given back as window
	sendWindow  int64
	remoteEnded bool
	sentEnd     bool
	closed      bool
	err         error
	rdeadline   time.Time
	wdeadline   time.Time
}

func (s *h2Stream) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *h2Stream) wake() {
	s.signal(s.notify)
	s.signal(s.wnotify)
}

// waitOn waits for a signal on ch or until deadline.
func waitOn(ch chan struct{}, deadline time.Time) {
	if deadline.IsZero() {
		<-ch
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// readable reports, with c.mu held, whether a Read would not block, and
// the error it would return without data.
func (s *h2Stream) readable() (bool, error) {
	switch {
	case len(s.rbuf) > 0:
		return true, nil
	case s.closed:
		return true, net.ErrClosed
	case s.err != nil:
		return true, s.err
	case s.remoteEnded:
		return true, io.EOF
	case !s.rdeadline.IsZero() && !time.Now().Before(s.rdeadline):
		return true, os.ErrDeadlineExceeded
	}
	return false, nil
}

// WaitRead returns once a Read would not block (pollread.Waiter).
func (s *h2Stream) WaitRead() error {
	for {
		s.c.mu.Lock()
		ok, err := s.readable()
		dl := s.rdeadline
		s.c.mu.Unlock()
		if ok {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return err
			}
			return nil
		}
		waitOn(s.notify, dl)
	}
}

// Read returns DATA of the stream and gives window back as it is read.
func (s *h2Stream) Read(p []byte) (int, error) {
	c := s.c
	for {
		c.mu.Lock()
		ok, err := s.readable()
		if ok && len(s.rbuf) > 0 {
			n := copy(p, s.rbuf)
			s.rbuf = s.rbuf[n:]
			if len(s.rbuf) == 0 {
				s.rbuf = nil
			}
			s.unacked += n
			upd := 0
			if s.unacked >= h2StreamUpdateAt && !s.remoteEnded {
				upd, s.unacked = s.unacked, 0
			}
			c.mu.Unlock()
			if upd > 0 {
				_ = c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(s.id, uint32(upd)) })
			}
			return n, nil
		}
		dl := s.rdeadline
		c.mu.Unlock()
		if ok {
			return 0, err
		}
		waitOn(s.notify, dl)
	}
}

// Write sends p as DATA within the server's windows, waiting for window
// until the write deadline.
func (s *h2Stream) Write(p []byte) (int, error) {
	c := s.c
	written := 0
	for len(p) > 0 {
		c.mu.Lock()
		var n int64
		for {
			var err error
			switch {
			case s.closed || s.sentEnd:
				err = net.ErrClosed
			case s.err != nil:
				err = s.err
			case s.sendWindow > 0 && c.sendWindow > 0:
				n = min(int64(len(p)), s.sendWindow, c.sendWindow, int64(c.peerFrame))
			case !s.wdeadline.IsZero() && !time.Now().Before(s.wdeadline):
				err = os.ErrDeadlineExceeded
			}
			if err != nil {
				c.mu.Unlock()
				return written, err
			}
			if n > 0 {
				break
			}
			if c.sendWindow <= 0 {
				c.blocked[s] = struct{}{}
			}
			dl := s.wdeadline
			c.mu.Unlock()
			waitOn(s.wnotify, dl)
			c.mu.Lock()
		}
		s.sendWindow -= n
		c.sendWindow -= n
		dl := s.wdeadline
		c.mu.Unlock()
		chunk := p[:n]
		if err := c.write(dl, func(fr *http2.Framer) error { return fr.WriteData(s.id, false, chunk) }); err != nil {
			return written, err
		}
		written += int(n)
		p = p[n:]
	}
	return written, nil
}

// Close ends the client's side of the stream (END_STREAM) and stops
// reading; the stream is reset if the server has not ended its side
// within h2CloseWait.
func (s *h2Stream) Close() error {
	c := s.c
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return nil
	}
	s.closed = true
	s.rbuf = nil
	send := !s.sentEnd && s.err == nil
	s.sentEnd = true
	both := s.remoteEnded
	c.mu.Unlock()
	s.wake()
	if !send || both {
		if send {
			_ = c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteData(s.id, true, nil) })
		}
		c.forget(s)
		return nil
	}
	if err := c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteData(s.id, true, nil) }); err != nil {
		return err
	}
	time.AfterFunc(h2CloseWait, func() {
		if c.forget(s) {
			_ = c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteRSTStream(s.id, http2.ErrCodeCancel) })
		}
	})
	return nil
}

// Abort resets the stream (CANCEL) unless it is over; Read and Write
// return.
func (s *h2Stream) Abort() error {
	c := s.c
	c.mu.Lock()
	s.closed = true
	s.rbuf = nil
	c.mu.Unlock()
	s.wake()
	if c.forget(s) {
		c.mu.Lock()
		dead := c.err != nil
		c.mu.Unlock()
		if !dead {
			return c.write(time.Time{}, func(fr *http2.Framer) error { return fr.WriteRSTStream(s.id, http2.ErrCodeCancel) })
		}
	}
	return nil
}

func (s *h2Stream) LocalAddr() net.Addr  { return s.c.nc.LocalAddr() }
func (s *h2Stream) RemoteAddr() net.Addr { return s.c.nc.RemoteAddr() }

func (s *h2Stream) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

func (s *h2Stream) SetReadDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.rdeadline = t
	s.c.mu.Unlock()
	s.signal(s.notify)
	return nil
}

func (s *h2Stream) SetWriteDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.wdeadline = t
	s.c.mu.Unlock()
	s.signal(s.wnotify)
	return nil
}

var (
	_ net.Conn        = (*h2Stream)(nil)
	_ pollread.Waiter = (*h2Stream)(nil)
)
