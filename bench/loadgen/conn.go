package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	randv2 "math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/pollread"
	"github.com/wsgate/wsgate/internal/sockopt"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// CloseAbnormal (1006) is the code a Conn reports when the connection ended
// without a close frame from the server. It never appears on the wire.
const CloseAbnormal uint16 = 1006

// DefaultTimeout is the handshake timeout when Dialer.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// readBufSize is the pooled read buffer; a connection holds one only while
// bytes are being read, never while idle.
const readBufSize = 16 << 10

// maxMessage bounds a message the client assembles (frames or fragments);
// the server's own limit is usually lower.
const maxMessage = 16 << 20

var readPool = pollread.NewPool(readBufSize)

var writePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Failure reasons in Report.FailedBy besides "http_<status>".
const (
	ReasonDial      = "dial"
	ReasonTimeout   = "timeout"
	ReasonHandshake = "handshake"
	// ReasonTLS is a failed TLS handshake: an unknown authority (see
	// -ca), a name mismatch, no common version or cipher suite.
	ReasonTLS = "tls"
)

// DialError is a failed connection attempt with the reason it is counted
// under: "dial", "timeout", "tls" (the TLS handshake failed),
// "handshake" (a bad or unreadable 101, or an HTTP/2 stream that ended
// without an answer), or "http_<status>" for any other HTTP answer
// (over HTTP/2 as over HTTP/1.1).
type DialError struct {
	Reason string
	// Status is the HTTP status for "http_*" reasons, else 0.
	Status int
	Err    error
}

func (e *DialError) Error() string { return e.Reason + ": " + e.Err.Error() }

func (e *DialError) Unwrap() error { return e.Err }

// Reason returns the failure reason of err for Report.FailedBy.
func Reason(err error) string {
	var de *DialError
	if errors.As(err, &de) {
		return de.Reason
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return ReasonTimeout
	}
	return ReasonDial
}

// Target is a parsed ws:// or wss:// URL.
type Target struct {
	// Addr is host:port to dial.
	Addr string
	// Host is the Host header (the :authority over HTTP/2).
	Host string
	// Path is the request target (path and query).
	Path string
	// TLS is set for wss://: the connection is TLS, its server name
	// (SNI, and the name the certificate is checked against) ServerName,
	// the URL's host without the port.
	TLS        bool
	ServerName string
}

// ParseTarget parses a ws:// or wss:// URL.
func ParseTarget(raw string) (Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("parse url %q: %w", raw, err)
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return Target{}, fmt.Errorf("parse url %q: scheme must be ws or wss", raw)
	}
	if u.Host == "" {
		return Target{}, fmt.Errorf("parse url %q: no host", raw)
	}
	t := Target{Addr: u.Host, Host: u.Host, Path: u.RequestURI(), TLS: u.Scheme == "wss", ServerName: u.Hostname()}
	if u.Port() == "" {
		port := "80"
		if t.TLS {
			port = "443"
		}
		t.Addr = net.JoinHostPort(u.Hostname(), port)
	}
	return t, nil
}

// Dialer opens client connections. Its fields must not change while it
// dials; Dial is safe for concurrent use.
type Dialer struct {
	// Sources are the local addresses to dial from (default nil: the
	// kernel's choice).
	Sources *Sources
	// Timeout bounds the TCP connect, the TLS handshake and the upgrade
	// together (default 10s).
	Timeout time.Duration
	// Protocol is offered as Sec-WebSocket-Protocol when set (default
	// none); the Conn records whether the server selected it.
	Protocol string
	// Header is sent on every handshake, in order (default none); build
	// each with ParseHeader.
	Header []Header
	// TLS configures wss:// targets (default nil: the system's roots,
	// TLS 1.2 or 1.3). Its ServerName, NextProtos and session cache are
	// set per connection: the URL's host, "http/1.1" (or "h2" with
	// H2), and no resumption, so every connection is a full handshake.
	TLS *tls.Config
	// H2, when set, opens every WebSocket as an extended CONNECT stream
	// (RFC 8441) of one of its HTTP/2 connections instead of a connection
	// of its own: ALPN h2 over wss://, prior knowledge (h2c) over ws://.
	// Copies of the Dialer share it.
	H2 *H2Pool
}

// Transport names what d opens for t: "ws", "wss", "ws+h2c" or "wss+h2".
func (d *Dialer) Transport(t Target) string {
	switch {
	case d.H2 != nil && t.TLS:
		return "wss+h2"
	case d.H2 != nil:
		return "ws+h2c"
	case t.TLS:
		return "wss"
	}
	return "ws"
}

// Dial connects to t and performs the WebSocket upgrade. It returns a
// *DialError on failure.
func (d *Dialer) Dial(ctx context.Context, t Target) (*Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	if d.H2 != nil {
		return d.H2.dial(ctx, d, t)
	}
	nc, tc, err := d.connect(ctx, t, "http/1.1")
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, local: nc.LocalAddr(), hardClose: nc.Close, Fresh: true}
	if tc != nil {
		c.nc, c.TLS = tc, transportTLS(tc)
	}
	deadline, _ := ctx.Deadline()
	_ = c.nc.SetDeadline(deadline)
	if err := c.handshake(t, d.Protocol, d.Header); err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = c.nc.SetDeadline(time.Time{})
	if tc != nil {
		c.reader = newTLSReader(tc, readPool)
	} else {
		c.reader = pollread.NewReader(c.nc, readPool)
	}
	return c, nil
}

// connect opens the TCP connection to t (from the next source address)
// and, for wss://, runs the TLS handshake offering alpn. It returns the
// TCP connection and, for wss://, the TLS connection over it.
func (d *Dialer) connect(ctx context.Context, t Target, alpn string) (net.Conn, *tlsConn, error) {
	nd := net.Dialer{}
	if la := d.Sources.Next(); la != nil {
		nd.LocalAddr = la
		nd.Control = sockopt.BindNoPort
	}
	nc, err := nd.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, nil, &DialError{Reason: timeoutOr(err, ReasonDial), Err: fmt.Errorf("dial %s: %w", t.Addr, err)}
	}
	if !t.TLS {
		return nc, nil, nil
	}
	cfg := d.TLS.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = t.ServerName
	}
	cfg.NextProtos = []string{alpn}
	cfg.ClientSessionCache = nil
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, nil, &DialError{Reason: timeoutOr(err, ReasonTLS), Err: fmt.Errorf("tls handshake with %s: %w", t.Addr, err)}
	}
	return nc, &tlsConn{Conn: tc, tcp: nc}, nil
}

// timeoutOr returns ReasonTimeout for a deadline error, else reason.
func timeoutOr(err error, reason string) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return ReasonTimeout
	}
	return reason
}

// acceptKey computes Sec-WebSocket-Accept for key (RFC 6455 section 4.2.2).
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// handshake sends the upgrade request, with the extra header lines,
// and reads the answer, keeping any bytes after the header (an early first
// frame) for ReadLoop.
func (c *Conn) handshake(t Target, protocol string, extra []Header) error {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	var b strings.Builder
	b.Grow(256)
	b.WriteString("GET " + t.Path + " HTTP/1.1\r\nHost: " + t.Host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n")
	if protocol != "" {
		b.WriteString("Sec-WebSocket-Protocol: " + protocol + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h.Name + ": " + h.Value + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c.nc, b.String()); err != nil {
		return ioFailure("write upgrade request", err)
	}
	buf := make([]byte, 0, 1024)
	end := -1
	for end < 0 {
		if len(buf) == cap(buf) {
			if cap(buf) >= 16<<10 {
				return &DialError{Reason: ReasonHandshake, Err: errors.New("response header over 16 KiB")}
			}
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
		}
		n, err := c.nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if end = bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
			break
		}
		if err != nil {
			return ioFailure("read upgrade response", err)
		}
	}
	status, hdr, err := parseResponse(buf[:end+2])
	if err != nil {
		return &DialError{Reason: ReasonHandshake, Err: err}
	}
	if status != 101 {
		return &DialError{Reason: "http_" + strconv.Itoa(status), Status: status, Err: fmt.Errorf("upgrade answered %d", status)}
	}
	if hdr["sec-websocket-accept"] != acceptKey(key) {
		return &DialError{Reason: ReasonHandshake, Err: errors.New("wrong Sec-WebSocket-Accept")}
	}
	c.Protocol = hdr["sec-websocket-protocol"]
	if c.Protocol != "" && c.Protocol != protocol {
		return &DialError{Reason: ReasonHandshake, Err: fmt.Errorf("server selected subprotocol %q, not offered", c.Protocol)}
	}
	if rest := buf[end+4:]; len(rest) > 0 {
		c.pending = append([]byte(nil), rest...)
	}
	return nil
}

func ioFailure(what string, err error) error {
	reason := ReasonDial
	if errors.Is(err, os.ErrDeadlineExceeded) {
		reason = ReasonTimeout
	} else if errors.Is(err, io.EOF) {
		reason = ReasonHandshake
	}
	return &DialError{Reason: reason, Err: fmt.Errorf("%s: %w", what, err)}
}

// parseResponse parses an HTTP/1.1 status line and header lines (CRLF
// separated, no trailing blank line) into the status and lowercase keys.
func parseResponse(p []byte) (int, map[string]string, error) {
	lines := strings.Split(string(p), "\r\n")
	proto, rest, ok := strings.Cut(lines[0], " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") {
		return 0, nil, fmt.Errorf("bad status line %q", lines[0])
	}
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if err != nil || status < 100 || status > 999 {
		return 0, nil, fmt.Errorf("bad status line %q", lines[0])
	}
	hdr := map[string]string{}
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return 0, nil, fmt.Errorf("bad header line %q", l)
		}
		hdr[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return status, hdr, nil
}

// Conn is one client WebSocket: a TCP connection, a TLS connection, or a
// stream of an HTTP/2 connection. One goroutine runs ReadLoop; Write,
// Ping and Close may be called from any goroutine (writes are
// serialised). While idle it holds no buffer: ReadLoop waits in the
// runtime poller (or for its stream's data) and borrows a pooled buffer
// only when bytes arrive.
type Conn struct {
	nc        net.Conn     // the TCP or TLS connection, or the stream
	local     net.Addr     // the TCP connection's local address
	hardClose func() error // closes without a TLS close_notify; resets a stream
	reader    frameSource
	// Protocol is the subprotocol the server selected ("" for none).
	Protocol string
	// TLS describes the TLS connection the WebSocket runs over (nil
	// over ws://); Fresh is set when this Dial made it (always, but
	// for a stream of an HTTP/2 connection opened before).
	TLS   *TransportTLS
	Fresh bool

	wmu     sync.Mutex
	pending []byte // bytes of an incomplete frame, nil while idle
	msg     []byte // a fragmented message being assembled
	msgOp   wsframe.Opcode
	closing atomic.Bool // a close frame went out (client's or the answer)
	byUs    atomic.Bool // the client chose to close (Close or Abort)
	closed  atomic.Bool // the close handshake finished or the conn failed
}

// frameSource reads a connection into pooled buffers (pollread.Reader,
// tlsReader).
type frameSource interface {
	Read() (*[]byte, int, error)
}

// LocalAddr returns the client side's address (its HTTP/2 connection's
// for a stream).
func (c *Conn) LocalAddr() net.Addr { return c.local }

// SetReadDeadline bounds ReadLoop's wait; a passed deadline ends it with
// an error wrapping os.ErrDeadlineExceeded.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.nc.SetReadDeadline(t) }

// ReadLoop reads frames until the connection ends and calls onMsg with each
// complete text or binary message; p is valid only during the call. It
// answers pings, answers a server's close, and returns the close code the
// server sent (CloseAbnormal when the connection ended without one, 1005
// for a close frame without a code) and the read error if there was no
// close frame. It closes the socket before returning.
func (c *Conn) ReadLoop(onMsg func(op wsframe.Opcode, p []byte)) (uint16, error) {
	defer func() {
		c.closed.Store(true)
		_ = c.nc.Close()
		c.pending, c.msg = nil, nil
	}()
	if len(c.pending) > 0 {
		p := c.pending
		c.pending = nil
		if code, done, err := c.consume(p, onMsg); done {
			return code, err
		}
	}
	for {
		bp, n, err := c.reader.Read()
		if n > 0 {
			var data []byte
			if c.pending != nil {
				data = append(c.pending, (*bp)[:n]...)
				c.pending = nil
			} else {
				data = (*bp)[:n]
			}
			code, done, cerr := c.consume(data, onMsg)
			readPool.Put(bp)
			if done {
				return code, cerr
			}
		} else {
			readPool.Put(bp)
		}
		if err != nil {
			return CloseAbnormal, fmt.Errorf("read: %w", err)
		}
	}
}

// consume parses the frames in p; an incomplete frame at the end is copied
// into c.pending. done is set when a close frame arrived or the stream
// broke the protocol.
func (c *Conn) consume(p []byte, onMsg func(wsframe.Opcode, []byte)) (code uint16, done bool, err error) {
	for len(p) > 0 {
		h, hl, err := wsframe.ParseHeader(p)
		if errors.Is(err, wsframe.ErrShortHeader) {
			break
		}
		if err != nil {
			return CloseAbnormal, true, fmt.Errorf("server frame: %w", err)
		}
		if h.Length > maxMessage {
			return CloseAbnormal, true, fmt.Errorf("server frame of %d bytes: %w", h.Length, wsframe.ErrTooLarge)
		}
		if uint64(len(p)-hl) < h.Length {
			break
		}
		payload := p[hl : hl+int(h.Length)]
		p = p[hl+int(h.Length):]
		if h.Masked {
			wsframe.Mask(h.Mask, 0, payload)
		}
		switch h.Op {
		case wsframe.OpPing:
			_ = c.writeFrame(wsframe.OpPong, payload)
		case wsframe.OpPong:
		case wsframe.OpClose:
			code, _, _ := wsframe.ParseClosePayload(payload)
			if code == 0 {
				code = wsframe.CloseNoStatus
			}
			if c.closing.CompareAndSwap(false, true) {
				c.writeClose(code)
			}
			return code, true, nil
		case wsframe.OpText, wsframe.OpBinary:
			if h.Fin && c.msg == nil {
				onMsg(h.Op, payload)
				continue
			}
			c.msgOp = h.Op
			c.msg = append(c.msg[:0], payload...)
		case wsframe.OpContinuation:
			if len(c.msg)+len(payload) > maxMessage {
				return CloseAbnormal, true, fmt.Errorf("fragmented message: %w", wsframe.ErrTooLarge)
			}
			c.msg = append(c.msg, payload...)
			if h.Fin {
				onMsg(c.msgOp, c.msg)
				c.msg = nil
			}
		}
	}
	if len(p) > 0 {
		c.pending = append([]byte(nil), p...)
	}
	return 0, false, nil
}

// randomKey returns a fresh masking key.
func randomKey() [4]byte {
	k := randv2.Uint32()
	return [4]byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
}

// writeFrame sends one masked frame.
func (c *Conn) writeFrame(op wsframe.Opcode, payload []byte) error {
	key := randomKey()
	bp := writePool.Get().(*[]byte)
	buf := wsframe.AppendHeader((*bp)[:0], wsframe.Header{Fin: true, Op: op, Masked: true, Mask: key, Length: uint64(len(payload))})
	start := len(buf)
	buf = append(buf, payload...)
	wsframe.Mask(key, 0, buf[start:])
	c.wmu.Lock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(DefaultTimeout))
	_, err := c.nc.Write(buf)
	c.wmu.Unlock()
	if cap(buf) <= 64<<10 {
		*bp = buf[:0]
		writePool.Put(bp)
	}
	if err != nil {
		return fmt.Errorf("write %s frame: %w", op, err)
	}
	return nil
}

func (c *Conn) writeClose(code uint16) {
	key := randomKey()
	var buf [wsframe.MaxHeaderLen + 2]byte
	frame := wsframe.AppendClose(buf[:0], code, "", &key)
	c.wmu.Lock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(DefaultTimeout))
	_, _ = c.nc.Write(frame)
	c.wmu.Unlock()
}

// Write sends one unfragmented text or binary message.
func (c *Conn) Write(op wsframe.Opcode, payload []byte) error {
	if c.closing.Load() {
		return net.ErrClosed
	}
	return c.writeFrame(op, payload)
}

// Ping sends a ping with an empty payload.
func (c *Conn) Ping() error { return c.writeFrame(wsframe.OpPing, nil) }

// Close starts the client's close handshake with code (1000 when 0) and
// gives the server wait to answer: ReadLoop returns when the answer
// arrives, or with a timeout error after wait. It does nothing after the
// first call or once the server closed first.
func (c *Conn) Close(code uint16, wait time.Duration) {
	if c.closed.Load() {
		return
	}
	c.byUs.Store(true)
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	if code == 0 {
		code = 1000
	}
	c.writeClose(code)
	_ = c.SetReadDeadline(time.Now().Add(wait))
}

// Abort closes the socket without a close frame (and without a TLS
// close_notify; a stream is reset with CANCEL); ReadLoop returns.
func (c *Conn) Abort() {
	c.byUs.Store(true)
	c.closing.Store(true)
	_ = c.hardClose()
}

// Closing reports whether the client chose to close (Close or Abort), as
// opposed to the server or the network ending the connection.
func (c *Conn) Closing() bool { return c.byUs.Load() }
