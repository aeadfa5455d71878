package gateway

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// limiter caps open client connections (tunnels and handshakes in flight)
// gateway-wide and per client IP.
type limiter struct {
	max   atomic.Int64
	perIP atomic.Int64 // 0 = unlimited

	total atomic.Int64
	mu    sync.Mutex
	byIP  map[string]int
}

func newLimiter(maxConns, perIP int) *limiter {
	l := &limiter{byIP: make(map[string]int)}
	l.set(maxConns, perIP)
	return l
}

// set changes the limits for the next admissions; open connections stay.
func (l *limiter) set(maxConns, perIP int) {
	l.max.Store(int64(maxConns))
	l.perIP.Store(int64(perIP))
}

// slot is one admitted connection; release frees it once.
type slot struct {
	l        *limiter
	ip       string
	counted  bool // counted in byIP
	released atomic.Bool
}

// admit takes a slot for a connection from ip, or returns nil and the status
// to answer: 503 when the gateway is full, 429 when the IP is.
func (l *limiter) admit(ip net.IP) (*slot, int) {
	if l.total.Add(1) > l.max.Load() {
		l.total.Add(-1)
		return nil, fasthttp.StatusServiceUnavailable
	}
	s := &slot{l: l}
	if perIP := int(l.perIP.Load()); perIP > 0 {
		s.ip, s.counted = string(ip), true
		l.mu.Lock()
		if l.byIP[s.ip] >= perIP {
			l.mu.Unlock()
			l.total.Add(-1)
			return nil, fasthttp.StatusTooManyRequests
		}
		l.byIP[s.ip]++
		l.mu.Unlock()
	}
	return s, 0
}

func (s *slot) release() {
	if s.released.Swap(true) {
		return
	}
	l := s.l
	if s.counted {
		l.mu.Lock()
		if l.byIP[s.ip]--; l.byIP[s.ip] <= 0 {
			delete(l.byIP, s.ip)
		}
		l.mu.Unlock()
	}
	l.total.Add(-1)
}

// open is the number of admitted connections.
func (l *limiter) open() int64 { return l.total.Load() }
