package edge

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/internal/throttle"
	"github.com/wsgate/wsgate/internal/tlsrecord"
)

// Accept-error backoff: a listener out of descriptors (or kernel memory)
// pauses before its next accept, 5 ms doubling up to 250 ms, so it neither
// spins nor waits long once descriptors are free again. The queue of
// connections waiting to be accepted is kept by the kernel meanwhile.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = 250 * time.Millisecond
	// acceptLogEvery is the shortest interval between two log lines about
	// accept errors on one listener; the lines carry a count.
	acceptLogEvery = time.Second
)

// Refusing a connection over a limit: the answer is written with a short
// deadline (it fits in a fresh socket's buffer, so it never waits in
// practice). A 503 socket then lingers so the client reads the answer
// rather than a reset: at most RefuseLingerMax sockets at once, each for at
// most RefuseLingerTime, each holding a place of its address's own (see
// Limiter.hold). A 429 socket never lingers, nor does a 503 when the
// lingering sockets are all taken or its address is at max_conns_per_ip:
// one address holds no socket beyond max_conns_per_ip.
const (
	refuseWriteTimeout = 100 * time.Millisecond
	// RefuseLingerTime is the longest a refused socket lingers.
	RefuseLingerTime = 500 * time.Millisecond
	// RefuseLingerMax is the most refused sockets that linger at once,
	// per listener.
	RefuseLingerMax   = 64
	refuseLingerBytes = 64 << 10
)

// Metrics counts what a Listener refuses and the accept errors it
// outlives. It is called from the accept loop and from the goroutines
// reading PROXY headers, so it must be safe for concurrent use and fast.
type Metrics interface {
	// Refused counts a connection refused at accept, by limit:
	// max_conns_per_ip, max_conns, proxy_untrusted, proxy_header. It is
	// called once the socket is closed (or handed to the linger).
	Refused(limit string)
	// AcceptError counts an accept error the listener paused on and
	// outlived, by errno: EMFILE, ENFILE, ENOBUFS, ENOMEM.
	AcceptError(errno string)
}

// AccessLog writes the access log line of a connection refused at accept
// over a limit, with the status it is answered (429, 503) and the limit
// (max_conns_per_ip, max_conns). It must be safe for concurrent use.
type AccessLog interface {
	Connection(c net.Conn, status int, reason string)
}

// Listener is a client or admin listener as the gateway serves it.
// Accept never returns a transient resource error (EMFILE, ENFILE, ENOBUFS,
// ENOMEM): it pauses and accepts again, counting and logging them. With a
// Limiter, each connection takes its slot at accept; one over a limit is
// answered 429 or 503 at once and closed, and never reaches fasthttp.
// Accept is called by one goroutine; Close may be called from any.
type Listener struct {
	net.Listener
	limits  *Limiter // nil: no connection limits (the admin listener)
	metrics Metrics
	log     *slog.Logger
	access  AccessLog // nil: no access log (the admin listener)
	// retryAfter is the Retry-After of a refusal, in seconds.
	retryAfter func() int
	// linger holds a token per lingering refused socket.
	linger chan struct{}
	// tls, when not nil, makes this a TLS listener: an admitted
	// connection is returned as a *tls.Conn on top of its counted socket,
	// its handshake bounded by handshakeTimeout from accept.
	tls              *tls.Config
	handshakeTimeout func() time.Duration

	closeOnce sync.Once
	closed    chan struct{}

	errLog acceptLog

	// proxy is set when the listener reads a PROXY header on each
	// connection (proxied.go); nil otherwise.
	proxy *proxyState

	// backoff, when not nil, refuses the addresses cut for flooding
	// (backoff.go).
	backoff  Backoff
	floodLog floodLog
}

// NewListener returns ln as the gateway serves it: limits (nil: none)
// caps its connections, m counts what it refuses and the accept errors it
// outlives, log gets its lines, access (nil: none) the access log lines of
// the connections it refuses, and retryAfter is the Retry-After of a
// refusal in seconds, read at each refusal (the generation in force).
func NewListener(ln net.Listener, limits *Limiter, m Metrics, log *slog.Logger, access AccessLog, retryAfter func() int) *Listener {
	return &Listener{
		Listener:   ln,
		limits:     limits,
		access:     access,
		metrics:    m,
		log:        log,
		retryAfter: retryAfter,
		linger:     make(chan struct{}, RefuseLingerMax),
		closed:     make(chan struct{}),
		errLog:     acceptLog{log: log, addr: ln.Addr().String()},
	}
}

// Accept waits for the next connection within the limits. On a TLS
// listener it is returned as a TLS connection (a *tls.Conn inside) on top
// of the counted socket (and after the PROXY header, if the listener reads
// one), which ends right
// after the handshake if that was an ACME tls-alpn-01 validation (see
// serverConn).
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.accept()
	if err != nil || l.tls == nil {
		return c, err
	}
	// The handshake runs on the connection's first read, in its serving
	// goroutine, never here: a client that never finishes it is cut at
	// this deadline (the request's own read deadline follows it; the
	// tunnel clears both). crypto/tls gets the socket wrapped: a tunnel's
	// writes to a client that pauses reading wait below it, where a
	// timed-out write is not final (see tunnel.TLSSocket).
	s := tunnel.NewTLSSocket(c)
	_ = s.SetDeadline(time.Now().Add(l.handshakeTimeout()))
	return newServerConn(s, l.tls, l.metrics), nil
}

// accept waits for the next connection within the limits, as a counted
// socket.
func (l *Listener) accept() (net.Conn, error) {
	if l.proxy != nil {
		return l.acceptProxied()
	}
	for {
		c, err := l.acceptRaw()
		if err != nil {
			return nil, err
		}
		if l.limits == nil {
			return c, nil
		}
		ip := remoteIP(c)
		if l.refusedForFlood(c, ip) {
			continue
		}
		s, status := l.limits.admit(ip)
		if s == nil {
			l.refuse(c, ip, status)
			continue
		}
		return newCountedConn(c, s), nil
	}
}

// acceptRaw accepts the next socket, pausing on transient errors.
func (l *Listener) acceptRaw() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			errno, ok := transientAcceptError(err)
			if !ok {
				return nil, err
			}
			pause = min(max(2*pause, acceptBackoffMin), acceptBackoffMax)
			l.metrics.AcceptError(errno)
			l.errLog.failed(err, pause)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		if pause > 0 {
			l.errLog.resumed()
		}
		return c, nil
	}
}

// WithTLS makes l a TLS listener serving config (see Listener.tls): an
// admitted connection's handshake is bounded by handshakeTimeout, read at
// each accept (the generation in force). After the handshake the record
// layer of a TLS 1.3 connection is taken from crypto/tls (see serverConn).
func (l *Listener) WithTLS(config *tls.Config, handshakeTimeout func() time.Duration) *Listener {
	// Made once: the session ticket keys crypto/tls makes are this
	// config's (see tlsrecord.ServerConfig).
	l.tls, l.handshakeTimeout = tlsrecord.ServerConfig(config), handshakeTimeout
	return l
}

// Close stops Accept, also while it pauses, and closes the listener.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// transientAcceptError reports whether err is a shortage an accept loop
// outlives: the process or the system out of descriptors, or the kernel
// out of memory for sockets. It returns the errno's name.
func transientAcceptError(err error) (string, bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return "", false
	}
	switch errno {
	case syscall.EMFILE:
		return "EMFILE", true
	case syscall.ENFILE:
		return "ENFILE", true
	case syscall.ENOBUFS:
		return "ENOBUFS", true
	case syscall.ENOMEM:
		return "ENOMEM", true
	}
	return "", false
}

// acceptLog writes one listener's log lines about accept errors: at most
// one line per acceptLogEvery, each with the number of errors since the
// line before, and a last line once the listener accepts again. It is safe
// for concurrent use (a timer writes a deferred last line).
type acceptLog struct {
	log  *slog.Logger
	addr string

	mu      sync.Mutex
	lines   throttle.Lines
	pending bool      // errors since the last "accepting again"
	since   time.Time // the first of them
	failing bool      // the last accept failed
	timer   *time.Timer
}

// failed notes one accept error; the accept loop pauses for pause next.
func (a *acceptLog) failed(err error, pause time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if !a.pending {
		a.pending, a.since = true, now
	}
	a.failing = true
	n, ok := a.lines.Note(now, acceptLogEvery)
	if !ok {
		return
	}
	a.log.Error("accept failed; pausing before the next accept",
		"addr", a.addr, "err", err, "errors", n, "pause", pause)
}

// resumed notes an accept that succeeded after errors. The line saying so
// is written now, or once acceptLogEvery has passed since the last line
// if the listener has not failed again by then.
func (a *acceptLog) resumed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failing = false
	if a.timer != nil {
		return
	}
	if wait := a.lines.Wait(time.Now(), acceptLogEvery); wait > 0 {
		a.timer = time.AfterFunc(wait, a.flush)
		return
	}
	a.writeResumed()
}

func (a *acceptLog) flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = nil
	if !a.failing { // failing again: its next line carries the count
		a.writeResumed()
	}
}

func (a *acceptLog) writeResumed() {
	if !a.pending {
		return
	}
	now := time.Now()
	a.log.Warn("accepting again", "addr", a.addr, "errors", a.lines.Take(now), "after", now.Sub(a.since).Round(time.Millisecond))
	a.pending = false
}

// refuse answers a connection over a limit and closes it: 429 over
// max_conns_per_ip, 503 over max_conns, both with Retry-After and
// Connection: close. It never blocks the accept loop. On a TLS listener
// the socket is closed before any TLS handshake, without an answer: one
// would need a handshake, the very work the limits are there to refuse.
func (l *Listener) refuse(c net.Conn, ip netip.Addr, status int) {
	reason := "max_conns"
	msg := "connection limit reached"
	if status == fasthttp.StatusTooManyRequests {
		reason = "max_conns_per_ip"
		msg = "too many connections from your address"
	}
	// Counted once the socket is closed (or handed to the linger), so a
	// count read off the metric never includes a socket still being refused.
	defer l.metrics.Refused(reason)
	if l.access != nil {
		l.access.Connection(c, status, reason)
	}
	if l.tls != nil {
		closeDrained(c)
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, err := c.Write(refusal(status, msg, l.retryAfter()))
	if err == nil && status == fasthttp.StatusServiceUnavailable {
		select {
		case l.linger <- struct{}{}:
			if s := l.limits.hold(ip); s != nil {
				go l.lingerClose(c, s)
				return
			}
			<-l.linger
		default:
		}
	}
	closeDrained(c)
}

// refusal renders the whole answer to a refused connection.
func refusal(status int, msg string, retryAfter int) []byte {
	body := "wsgate: " + msg + "\n"
	b := make([]byte, 0, 192)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, fasthttp.StatusMessage(status)...)
	b = append(b, "\r\nServer: wsgate\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: "...)
	b = strconv.AppendInt(b, int64(retryAfter), 10)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// lingerClose half-closes a refused socket and discards what the client
// still sends until it closes too or RefuseLingerTime passes, so the answer
// is not lost to a reset; then it frees its linger token and its address's
// place s.
func (l *Listener) lingerClose(c net.Conn, s *slot) {
	defer func() { <-l.linger }()
	defer s.release()
	defer c.Close()
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(RefuseLingerTime))
	var buf [512]byte
	for n := 0; n < refuseLingerBytes; {
		k, err := c.Read(buf[:])
		if err != nil {
			return
		}
		n += k
	}
}

// closeDrained half-closes c, discards what it has already received
// without waiting for more, and closes it: a socket closed with unread
// bytes sends a reset, which can destroy the answer just written.
func closeDrained(c net.Conn) {
	defer c.Close()
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Read(func(fd uintptr) bool {
		var buf [512]byte
		for range refuseLingerBytes / len(buf) {
			if n, err := syscall.Read(int(fd), buf[:]); n <= 0 || err != nil {
				break
			}
		}
		return true // never wait for more
	})
}

// remoteIP is the client address of c, IPv4 unmapped from IPv6; the zero
// Addr when c has no IP address (all such connections share one count).
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// CountedConn is an admitted client connection: closing it frees its slot,
// once, after the socket is closed. Behind a PROXY header it reports the
// client address the header carried, and reads first the bytes read
// past the header. It embeds the *net.TCPConn so
// SyscallConn (the tunnel's poller reads), CloseWrite and keep-alive
// settings work on it as on the socket; fasthttp's hijacked connection
// unwraps to it, so the slot lives exactly as long as the socket.
type CountedConn struct {
	*net.TCPConn
	slot *slot
	*peer
}

// peer is what a PROXY header changed about a connection: the client
// address it carried (nil: the socket's own) and the bytes read past it.
// A connection without a header has none (a nil *peer), so an idle tunnel's
// client connection is three pointers.
type peer struct {
	remote net.Addr
	head   []byte
}

// or returns the address the header carried, or, when it carried none,
// own: the connection's own.
func (p *peer) or(own net.Addr) net.Addr {
	if p != nil && p.remote != nil {
		return p.remote
	}
	return own
}

// readHead copies into b the bytes read past the header, if any are
// left, and reports whether there were.
func (p *peer) readHead(b []byte) (int, bool) {
	if p == nil || len(p.head) == 0 {
		return 0, false
	}
	n := copy(b, p.head)
	if p.head = p.head[n:]; len(p.head) == 0 {
		p.head = nil // not the buffer for the connection's life
	}
	return n, true
}

// RemoteAddr is the client address a PROXY header carried, or the socket's.
func (c *CountedConn) RemoteAddr() net.Addr { return c.or(c.TCPConn.RemoteAddr()) }

// Read returns the bytes read past a PROXY header first.
func (c *CountedConn) Read(b []byte) (int, error) {
	if n, ok := c.readHead(b); ok {
		return n, nil
	}
	return c.TCPConn.Read(b)
}

// Close closes the socket and frees the connection's slot.
func (c *CountedConn) Close() error {
	var err error
	if c.TCPConn != nil {
		err = c.TCPConn.Close()
	}
	c.slot.release()
	return err
}

// Socket returns the TCP socket itself. The tunnel's event-driven engine
// takes the socket over (a descriptor of its own), closes the Go socket
// and calls DropSocket, and calls Close at the tunnel's end, after closing
// its descriptor: the slot is freed then. While bytes read past a PROXY
// header are still unread it returns nil, so the tunnel reads through Read
// (on goroutines) and loses none of them.
func (c *CountedConn) Socket() *net.TCPConn {
	if c.peer != nil && len(c.head) > 0 {
		return nil
	}
	return c.TCPConn
}

// DropSocket forgets the socket, which its new owner has closed, and what
// a PROXY header said: only Close may be called afterwards, and it only
// frees the slot.
func (c *CountedConn) DropSocket() { c.TCPConn, c.peer = nil, nil }

// countedOther is CountedConn for a connection that is not TCP.
type countedOther struct {
	net.Conn
	slot *slot
	*peer
}

// RemoteAddr is the client address a PROXY header carried, or the
// connection's.
func (c *countedOther) RemoteAddr() net.Addr { return c.or(c.Conn.RemoteAddr()) }

// Read returns the bytes read past a PROXY header first.
func (c *countedOther) Read(b []byte) (int, error) {
	if n, ok := c.readHead(b); ok {
		return n, nil
	}
	return c.Conn.Read(b)
}

// Close closes the connection and frees its slot.
func (c *countedOther) Close() error {
	err := c.Conn.Close()
	c.slot.release()
	return err
}

func newCountedConn(c net.Conn, s *slot) net.Conn {
	return newPeerConn(c, s, nil)
}

// newPeerConn is newCountedConn for a connection behind a PROXY header.
func newPeerConn(c net.Conn, s *slot, p *peer) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		return &CountedConn{TCPConn: tc, slot: s, peer: p}
	}
	return &countedOther{Conn: c, slot: s, peer: p}
}

var (
	_ net.Listener = (*Listener)(nil)
	_ syscall.Conn = (*CountedConn)(nil)
	_ net.Conn     = (*countedOther)(nil)
)
