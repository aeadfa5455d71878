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
	max   int64
	perIP int

	total atomic.Int64
	mu    sync.Mutex
	byIP  map[string]int
}

func newLimiter(maxConns, perIP int) *limiter {
	l := &limiter{max: int64(maxConns), perIP: perIP}
	if perIP > 0 {
		l.byIP = make(map[string]int)
	}
	return l
}

// slot is one admitted connection; release frees it once.
type slot struct {
	l        *limiter
	ip       string
	released atomic.Bool
}

// admit takes a slot for a connection from ip, or returns nil and the status
// to answer: 503 when the gateway is full, 429 when the IP is.
func (l *limiter) admit(ip net.IP) (*slot, int) {
	if l.total.Add(1) > l.max {
		l.total.Add(-1)
		return nil, fasthttp.StatusServiceUnavailable
	}
	s := &slot{l: l}
	if l.byIP != nil {
		s.ip = string(ip)
		l.mu.Lock()
		if l.byIP[s.ip] >= l.perIP {
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
	if l.byIP != nil {
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
