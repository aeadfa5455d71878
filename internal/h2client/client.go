// Package h2client is a small HTTP/2 client for tests: WebSockets as
// extended CONNECT streams (RFC 8441) over one connection, cleartext with
// prior knowledge (Dial) or any connection whose ALPN chose h2
// (Handshake), written with golang.org/x/net/http2's Framer and hpack, so
// that relay-backend's tests speak to the relay the way a gateway does
// without importing the gateway, and the gateway's speak to it the way a
// browser does. Dialer returns a websocket.Dialer
// whose connections are streams of one Conn, so tests drive members over
// HTTP/2 with the same *websocket.Conn as over HTTP/1.1.
//
// It is a test client: it gives back every byte of window as soon as it
// receives it (unless a stream is frozen), keeps whole refusal bodies and
// trusts the server.
package h2client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// GoAway is a GOAWAY frame the server sent.
type GoAway struct {
	LastStreamID uint32
	Code         http2.ErrCode
	Debug        string
}

// Conn is one HTTP/2 connection to a server. It is safe for concurrent
// use.
type Conn struct {
	nc   net.Conn
	fr   *http2.Framer
	done chan struct{} // closed when the reader has returned

	wmu  sync.Mutex // the Framer's write side and the encoder
	henc *hpack.Encoder
	hbuf bytes.Buffer

	mu         sync.Mutex
	cond       *sync.Cond // signalled on any change under mu
	streams    map[uint32]*Stream
	nextID     uint32
	settings   map[http2.SettingID]uint32
	peerWindow int64
	sendWindow int64
	goAways    []GoAway
	pingAcks   int
	err        error
}

// Dial connects to addr, sends the client preface and an empty SETTINGS,
// waits for the server's SETTINGS and acknowledges them.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return Handshake(nc, timeout)
}

// Handshake starts HTTP/2 on nc as Dial does; nc is closed on error.
func Handshake(nc net.Conn, timeout time.Duration) (*Conn, error) {
	c := &Conn{
		nc:         nc,
		done:       make(chan struct{}),
		streams:    make(map[uint32]*Stream),
		nextID:     1,
		peerWindow: 65535,
		sendWindow: 65535,
	}
	c.cond = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(nc, bufio.NewReader(nc))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	_ = nc.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		nc.Close()
		return nil, err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("read the server's SETTINGS: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		nc.Close()
		return nil, fmt.Errorf("the server's first frame is %v, not SETTINGS", f.Header())
	}
	c.settings = map[http2.SettingID]uint32{}
	_ = sf.ForeachSetting(func(s http2.Setting) error {
		c.settings[s.ID] = s.Val
		if s.ID == http2.SettingInitialWindowSize {
			c.peerWindow = int64(s.Val)
		}
		return nil
	})
	if err := c.fr.WriteSettingsAck(); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	go c.readLoop()
	return c, nil
}

// Settings returns the server's first SETTINGS.
func (c *Conn) Settings() map[http2.SettingID]uint32 { return c.settings }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while it is up).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// GoAways returns the GOAWAY frames received so far.
func (c *Conn) GoAways() []GoAway {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]GoAway(nil), c.goAways...)
}

// PingAcks returns how many PING acknowledgements came.
func (c *Conn) PingAcks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pingAcks
}

// Close closes the connection.
func (c *Conn) Close() error {
	err := c.nc.Close()
	<-c.done
	return err
}

// WriteFrames runs write with the Framer under the write lock, for tests
// that send frames of their own.
func (c *Conn) WriteFrames(write func(fr *http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return write(c.fr)
}

// Open opens a stream with an extended CONNECT for a WebSocket on path,
// with the fields of h (lowercased; Host, Connection, Upgrade and the
// HTTP/1.1 key fields are left out).
func (c *Conn) Open(path string, h http.Header) (*Stream, error) {
	return c.OpenRequest([]hpack.HeaderField{
		{Name: ":method", Value: "CONNECT"},
		{Name: ":protocol", Value: "websocket"},
		{Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: c.nc.RemoteAddr().String()},
		{Name: ":path", Value: path},
	}, h, false)
}

// OpenRequest opens a stream with the given pseudo-header fields and the
// fields of h, ending it at once with end.
func (c *Conn) OpenRequest(pseudo []hpack.HeaderField, h http.Header, end bool) (*Stream, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	s := &Stream{c: c, id: c.nextID, sendWindow: c.peerWindow, remoteEnded: false}
	c.nextID += 2
	c.streams[s.id] = s
	c.mu.Unlock()
	c.hbuf.Reset()
	for _, f := range pseudo {
		_ = c.henc.WriteField(f)
	}
	for name, values := range h {
		lower := strings.ToLower(name)
		switch lower {
		case "host", "connection", "upgrade", "sec-websocket-key":
			continue
		}
		for _, v := range values {
			_ = c.henc.WriteField(hpack.HeaderField{Name: lower, Value: v})
		}
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: end})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (c *Conn) readLoop() {
	defer close(c.done)
	var err error
	for err == nil {
		var f http2.Frame
		f, err = c.fr.ReadFrame()
		if err == nil {
			err = c.handle(f)
		}
	}
	c.mu.Lock()
	c.err = err
	for _, s := range c.streams {
		if s.err == nil {
			s.err = err
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
}

func (c *Conn) handle(f http2.Frame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	s := c.streams[f.Header().StreamID]
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		if s == nil {
			return nil
		}
		if s.status == 0 {
			fmt.Sscan(f.PseudoValue("status"), &s.status)
			s.header = http.Header{}
			for _, hf := range f.RegularFields() {
				k := http.CanonicalHeaderKey(hf.Name)
				s.header[k] = append(s.header[k], hf.Value)
			}
		}
		if f.StreamEnded() {
			s.remoteEnded = true
		}
	case *http2.DataFrame:
		n := f.Header().Length
		if n > 0 {
			inc := func(id uint32) { c.later(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(id, n) }) }
			inc(0)
			if s != nil && !s.frozen && !f.StreamEnded() {
				inc(s.id)
			} else if s != nil {
				s.owed += n
			}
		}
		if s == nil {
			return nil
		}
		s.rbuf = append(s.rbuf, f.Data()...)
		if f.StreamEnded() {
			s.remoteEnded = true
		}
	case *http2.RSTStreamFrame:
		if s != nil {
			s.reset = f.ErrCode
			s.resetSeen = true
			if s.err == nil {
				s.err = fmt.Errorf("stream %d reset: %v", s.id, f.ErrCode)
			}
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		_ = f.ForeachSetting(func(st http2.Setting) error {
			if st.ID == http2.SettingInitialWindowSize {
				d := int64(st.Val) - c.peerWindow
				for _, s := range c.streams {
					s.sendWindow += d
				}
				c.peerWindow = int64(st.Val)
			}
			return nil
		})
		c.later(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
		} else if s != nil {
			s.sendWindow += int64(f.Increment)
		}
	case *http2.PingFrame:
		if f.IsAck() {
			c.pingAcks++
		} else {
			data := f.Data
			c.later(func(fr *http2.Framer) error { return fr.WritePing(true, data) })
		}
	case *http2.GoAwayFrame:
		c.goAways = append(c.goAways, GoAway{f.LastStreamID, f.ErrCode, string(f.DebugData())})
	}
	return nil
}

// later writes frames from a goroutine of its own, so that the reader
// never waits for the write lock.
func (c *Conn) later(write func(fr *http2.Framer) error) {
	go func() { _ = c.WriteFrames(write) }()
}

// Stream is one stream of a Conn: a net.Conn over its DATA once the
// response is in.
type Stream struct {
	c  *Conn
	id uint32

	// Under c.mu:
	status      int
	header      http.Header
	rbuf        []byte
	remoteEnded bool
	sendWindow  int64
	frozen      bool   // no WINDOW_UPDATE for this stream
	owed        uint32 // window withheld while frozen
	reset       http2.ErrCode
	resetSeen   bool
	err         error
	closed      bool
	rdeadline   time.Time
}

// ID returns the stream identifier.
func (s *Stream) ID() uint32 { return s.id }

// Response waits up to timeout for the response HEADERS and returns the
// status and fields. For a status other than 2xx it also waits for the
// end of the stream and returns the body.
func (s *Stream) Response(timeout time.Duration) (int, http.Header, []byte, error) {
	c := s.c
	stop := time.AfterFunc(timeout, func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
	defer stop.Stop()
	end := time.Now().Add(timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if s.status >= 200 && s.status < 300 {
			return s.status, s.header, nil, nil
		}
		if s.status != 0 && (s.remoteEnded || s.resetSeen) {
			body := s.rbuf
			s.rbuf = nil
			return s.status, s.header, body, nil
		}
		if s.err != nil {
			return 0, nil, nil, s.err
		}
		if time.Now().After(end) {
			return 0, nil, nil, fmt.Errorf("stream %d: no response within %v", s.id, timeout)
		}
		c.cond.Wait()
	}
}

// Reset returns the RST_STREAM code the server sent, if any.
func (s *Stream) Reset() (http2.ErrCode, bool) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.reset, s.resetSeen
}

// Freeze stops (true) or resumes (false) giving the server window on this
// stream: a client that does not read.
func (s *Stream) Freeze(frozen bool) {
	c := s.c
	c.mu.Lock()
	s.frozen = frozen
	owed := s.owed
	if !frozen {
		s.owed = 0
	}
	c.mu.Unlock()
	if !frozen && owed > 0 {
		_ = c.WriteFrames(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(s.id, owed) })
	}
}

// Read returns the DATA received.
func (s *Stream) Read(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var stop *time.Timer
	defer func() {
		if stop != nil {
			stop.Stop()
		}
	}()
	for {
		if len(s.rbuf) > 0 {
			n := copy(p, s.rbuf)
			s.rbuf = s.rbuf[n:]
			return n, nil
		}
		switch {
		case s.closed:
			return 0, net.ErrClosed
		case s.err != nil:
			return 0, s.err
		case s.remoteEnded:
			return 0, io.EOF
		case !s.rdeadline.IsZero() && !time.Now().Before(s.rdeadline):
			return 0, errDeadline
		}
		if !s.rdeadline.IsZero() && stop == nil {
			stop = time.AfterFunc(time.Until(s.rdeadline), func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
		}
		c.cond.Wait()
	}
}

var errDeadline = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Write sends p as DATA within the server's windows.
func (s *Stream) Write(p []byte) (int, error) {
	c := s.c
	written := 0
	for len(p) > 0 {
		c.mu.Lock()
		for s.err == nil && !s.closed && (s.sendWindow <= 0 || c.sendWindow <= 0) {
			c.cond.Wait()
		}
		if s.err != nil || s.closed {
			err := s.err
			if err == nil {
				err = net.ErrClosed
			}
			c.mu.Unlock()
			return written, err
		}
		n := min(int64(len(p)), s.sendWindow, c.sendWindow, 16384)
		s.sendWindow -= n
		c.sendWindow -= n
		c.mu.Unlock()
		if err := c.WriteFrames(func(fr *http2.Framer) error { return fr.WriteData(s.id, false, p[:n]) }); err != nil {
			return written, err
		}
		written += int(n)
		p = p[n:]
	}
	return written, nil
}

// CloseWrite sends END_STREAM.
func (s *Stream) CloseWrite() error {
	return s.c.WriteFrames(func(fr *http2.Framer) error { return fr.WriteData(s.id, true, nil) })
}

// Abort sends RST_STREAM(CANCEL) and forgets the stream.
func (s *Stream) Abort() error {
	c := s.c
	c.mu.Lock()
	s.closed = true
	delete(c.streams, s.id)
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.WriteFrames(func(fr *http2.Framer) error { return fr.WriteRSTStream(s.id, http2.ErrCodeCancel) })
}

// Close sends END_STREAM and stops reading.
func (s *Stream) Close() error {
	c := s.c
	c.mu.Lock()
	was := s.closed
	s.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	if was {
		return nil
	}
	return s.CloseWrite()
}

// Ended reports whether the server ended its side of the stream.
func (s *Stream) Ended() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.remoteEnded
}

// LocalAddr returns the connection's local address.
func (s *Stream) LocalAddr() net.Addr { return s.c.nc.LocalAddr() }

// RemoteAddr returns the server's address.
func (s *Stream) RemoteAddr() net.Addr { return s.c.nc.RemoteAddr() }

// SetDeadline sets the read deadline; writes are bounded by the
// connection's.
func (s *Stream) SetDeadline(t time.Time) error { return s.SetReadDeadline(t) }

// SetReadDeadline bounds Read.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.c.mu.Lock()
	s.rdeadline = t
	s.c.cond.Broadcast()
	s.c.mu.Unlock()
	return nil
}

// SetWriteDeadline is accepted and ignored (writes wait for window only).
func (s *Stream) SetWriteDeadline(time.Time) error { return nil }

var _ net.Conn = (*Stream)(nil)

// ErrNoStream is returned by a Dialer connection used before its request.
var ErrNoStream = errors.New("h2client: no stream opened yet")
