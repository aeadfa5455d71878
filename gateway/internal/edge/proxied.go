package edge

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/proxyproto"
	"github.com/wsgate/wsgate/internal/throttle"
)

// proxyLogEvery is the shortest interval between two log lines about
// refused PROXY headers on one listener; the lines carry a count.
const proxyLogEvery = time.Second

// errUntrusted is why a connection from outside trusted_proxies is refused.
var errUntrusted = errors.New("peer is not in gateway.trusted_proxies")

// proxyState is a client listener's PROXY protocol side (proxy_protocol =
// true). One goroutine accepts and hands each trusted socket, holding a
// gateway-wide slot, to a goroutine of its own that reads the header, so
// a peer that sends nothing never holds up the accept loop; the header's
// client address then takes its max_conns_per_ip place, and the
// connection is delivered to Accept.
type proxyState struct {
	// trusted reports whether a peer may send a header; timeout bounds
	// reading one. Both read the generation in force.
	trusted func(netip.Addr) bool
	timeout func() time.Duration

	start sync.Once
	ready chan net.Conn
	done  chan struct{} // closed when the accept loop ends
	err   error         // why it ended; read after done

	mu    sync.Mutex
	lines throttle.Lines
}

// ProxyProtocol makes l read a PROXY header on every connection
// (proxy_protocol = true): trusted reports whether a peer may send one,
// timeout bounds reading it; both are read at each connection (the
// generation in force). l must have a Limiter.
func (l *Listener) ProxyProtocol(trusted func(netip.Addr) bool, timeout func() time.Duration) {
	l.proxy = &proxyState{
		trusted: trusted,
		timeout: timeout,
		ready:   make(chan net.Conn),
		done:    make(chan struct{}),
	}
}

// acceptProxied is Accept with proxy_protocol: the next connection whose
// header has been read.
func (l *Listener) acceptProxied() (net.Conn, error) {
	p := l.proxy
	p.start.Do(func() { go l.acceptLoopProxied() })
	select {
	case c := <-p.ready:
		return c, nil
	case <-p.done:
		return nil, p.err
	}
}

// acceptLoopProxied accepts until the listener fails or closes: an
// untrusted peer is closed at once, a socket over max_conns refused as
// without PROXY protocol, and every other one has its header read apart.
func (l *Listener) acceptLoopProxied() {
	p := l.proxy
	for {
		c, err := l.acceptRaw()
		if err != nil {
			p.err = err
			close(p.done)
			return
		}
		peerIP := remoteIP(c)
		if !p.trusted(peerIP) {
			l.proxyRefused(c, "proxy_untrusted", peerIP, errUntrusted)
			continue
		}
		s, status := l.limits.admitAny()
		if s == nil {
			l.refuse(c, peerIP, status)
			continue
		}
		go l.readProxyHeader(c, peerIP, s)
	}
}

// readProxyHeader reads c's PROXY header within handshake_timeout, takes
// the place of the address it carries, and delivers the connection to
// Accept; or refuses it.
func (l *Listener) readProxyHeader(c net.Conn, peerIP netip.Addr, s *slot) {
	p := l.proxy
	_ = c.SetReadDeadline(time.Now().Add(p.timeout()))
	h, rest, err := ReadProxyHeader(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		s.release()
		l.proxyRefused(c, "proxy_header", peerIP, err)
		return
	}
	ip, pr := peerIP, &peer{head: rest}
	if !h.Local {
		ip = h.Source.Addr().Unmap()
		pr.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, h.Source.Port()))
	}
	conn := newPeerConn(c, s, pr)
	if l.refusedForFlood(conn, ip) { // closes conn, which frees s
		return
	}
	if status := l.limits.charge(s, ip); status != 0 {
		l.refuse(conn, ip, status) // closes conn, which frees s
		return
	}
	select {
	case p.ready <- conn:
	case <-p.done:
		_ = conn.Close()
	}
}

// ReadProxyHeader reads a PROXY header from c, and returns it with the
// bytes read past it. It reads at most proxyproto.MaxHeader bytes.
func ReadProxyHeader(c net.Conn) (proxyproto.Header, []byte, error) {
	buf := make([]byte, 0, 512) // a version 1 header, or a version 2 one with some TLVs
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= proxyproto.MaxHeader { // Parse says so first; kept as a bound
				return proxyproto.Header{}, nil, fmt.Errorf("%w: longer than %d bytes", proxyproto.ErrInvalid, proxyproto.MaxHeader)
			}
			nb := make([]byte, len(buf), proxyproto.MaxHeader)
			copy(nb, buf)
			buf = nb
		}
		n, rerr := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		h, hn, err := proxyproto.Parse(buf)
		switch {
		case err == nil:
			var rest []byte
			if hn < len(buf) {
				rest = bytes.Clone(buf[hn:]) // not the whole buffer for the connection's life
			}
			return h, rest, nil
		case !errors.Is(err, proxyproto.ErrShort):
			return h, nil, err
		case rerr != nil:
			return h, nil, fmt.Errorf("reading the PROXY header (%d bytes so far): %w", len(buf), rerr)
		}
	}
}

// proxyRefused closes c, counts it under reason and logs it, at most one
// line per proxyLogEvery with the count since the last.
func (l *Listener) proxyRefused(c net.Conn, reason string, peerIP netip.Addr, err error) {
	_ = c.Close()
	l.metrics.Refused(reason)
	p := l.proxy
	p.mu.Lock()
	n, ok := p.lines.Note(time.Now(), proxyLogEvery)
	p.mu.Unlock()
	if ok {
		l.log.Warn("connection refused: PROXY protocol", "reason", reason, "peer", peerIP, "err", err, "refused", n)
	}
}
