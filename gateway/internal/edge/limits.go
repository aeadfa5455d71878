package edge

import (
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// Limiter caps open client connections gateway-wide and per client IP. A
// connection takes its slot when it is accepted, before a byte of its
// request is read, and gives it back when its socket closes: handshakes in
// flight, keep-alive HTTP connections and tunnels all count. It is safe for
// concurrent use.
type Limiter struct {
	ceiling int64 // what the open-file limit carries; 0 = no ceiling

	mu    sync.Mutex
	max   int64 // effective: min(configured, ceiling)
	conf  int64 // configured max_conns
	perIP int64 // 0 = unlimited
	byIP  map[netip.Addr]int64

	total atomic.Int64 // open slots; read without the lock
}

// NewLimiter returns a Limiter for maxConns and perIP, with maxConns never
// above ceiling (0 = no ceiling).
func NewLimiter(maxConns, perIP, ceiling int) *Limiter {
	l := &Limiter{ceiling: int64(ceiling), byIP: make(map[netip.Addr]int64)}
	l.Set(maxConns, perIP)
	return l
}

// Set changes the limits for the next admissions; open connections stay.
// maxConns is held to the ceiling.
func (l *Limiter) Set(maxConns, perIP int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conf = int64(maxConns)
	l.max = l.conf
	if l.ceiling > 0 && l.max > l.ceiling {
		l.max = l.ceiling
	}
	l.perIP = int64(perIP)
}

// Limits returns the configured and effective max_conns and max_conns_per_ip.
func (l *Limiter) Limits() (configured, effective, perIP int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conf, l.max, l.perIP
}

// Ceiling is what the open-file limit carries, which max_conns is held
// to; 0 = no ceiling.
func (l *Limiter) Ceiling() int64 { return l.ceiling }

// slot is one admitted connection, one more stream of a connection (see
// Stream), or one refused socket that lingers (see hold); release frees
// it once.
type slot struct {
	l        *Limiter
	ip       netip.Addr
	refused  bool // a place of ip's only (hold): no gateway-wide slot to free
	noIP     bool // a gateway-wide slot only, until charge (under l.mu)
	released atomic.Bool
}

// admit takes a slot for a connection from ip, or returns nil and the status
// to answer: 503 when the gateway is full, 429 when the IP is.
func (l *Limiter) admit(ip netip.Addr) (*slot, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total.Load() >= l.max {
		return nil, fasthttp.StatusServiceUnavailable
	}
	n := l.byIP[ip]
	if l.perIP > 0 && n >= l.perIP {
		return nil, fasthttp.StatusTooManyRequests
	}
	l.byIP[ip] = n + 1
	l.total.Add(1)
	return &slot{l: l, ip: ip}, 0
}

// admitAny takes a gateway-wide slot for a connection whose client
// address is not known yet (its PROXY header is still to be read), or
// returns nil and 503 when the gateway is full. charge then gives it its
// address's place.
func (l *Limiter) admitAny() (*slot, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total.Load() >= l.max {
		return nil, fasthttp.StatusServiceUnavailable
	}
	l.total.Add(1)
	return &slot{l: l, noIP: true}, 0
}

// charge takes a place of ip's for s, a slot from admitAny, and returns
// 0; or 429 when ip is at max_conns_per_ip, leaving s as it was.
func (l *Limiter) charge(s *slot, ip netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.byIP[ip]
	if l.perIP > 0 && n >= l.perIP {
		return fasthttp.StatusTooManyRequests
	}
	l.byIP[ip] = n + 1
	s.ip, s.noIP = ip, false
	return 0
}

// hold takes a place of ip's own for a refused socket that lingers while
// its answer is read, so an address never holds more sockets than
// max_conns_per_ip, refused ones included; nil when ip has no room. It
// takes no gateway-wide slot (the linger tokens bound those sockets).
func (l *Limiter) hold(ip netip.Addr) *slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.byIP[ip]
	if l.perIP > 0 && n >= l.perIP {
		return nil
	}
	l.byIP[ip] = n + 1
	return &slot{l: l, ip: ip, refused: true}
}

// Stream takes one more slot, gateway-wide and of ip's, for a request a
// connection carries beside others at once (an HTTP/2 connection's
// streams beyond its first), so that max_conns and max_conns_per_ip bound
// the requests being admitted or forwarded and the tunnels as they do
// over HTTP/1.1, where each is a connection: each such stream may hold a
// node socket, a plugin call and a goroutine, as a connection does. It
// returns the function that gives the slot back (calls after the first do
// nothing), or nil and the status to answer: 503 when the gateway is
// full, 429 when ip is.
func (l *Limiter) Stream(ip netip.Addr) (func(), int) {
	s, status := l.admit(ip)
	if s == nil {
		return nil, status
	}
	return s.release, 0
}

// PlaceOf is the address under which Stream counts c's streams: the one
// its place at accept was taken under (a PROXY header's, if it had one).
func PlaceOf(c net.Conn) netip.Addr { return remoteIP(c) }

// release frees the slot; calls after the first do nothing.
func (s *slot) release() {
	if s.released.Swap(true) {
		return
	}
	l := s.l
	l.mu.Lock()
	if s.noIP {
		// No place of an address's to give back.
	} else if n := l.byIP[s.ip] - 1; n > 0 {
		l.byIP[s.ip] = n
	} else {
		delete(l.byIP, s.ip)
	}
	if !s.refused {
		l.total.Add(-1)
	}
	l.mu.Unlock()
}

// Open is the number of admitted connections.
func (l *Limiter) Open() int64 { return l.total.Load() }

// FromIP is the number of admitted connections from ip, with its refused
// sockets that linger and its connections' further streams (Stream).
func (l *Limiter) FromIP(ip netip.Addr) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byIP[ip]
}

// ByIP returns a copy of the places held by each address: its admitted
// connections, its refused sockets that linger and its connections'
// further streams (Stream). An address holding none is not in it.
func (l *Limiter) ByIP() map[netip.Addr]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.byIP)
}

// Concurrency is fasthttp's Concurrency for the client listeners: every
// connection it serves holds a slot, so the highest max_conns any reload can
// set (the ceiling) bounds it; the margin covers a worker still finishing a
// connection whose slot was already freed. fasthttp never refuses one then.
func (l *Limiter) Concurrency() int {
	const margin = 1024
	if l.ceiling > 0 {
		return int(l.ceiling) + margin
	}
	_, eff, _ := l.Limits()
	return int(min(eff, 1<<30)) + margin
}
