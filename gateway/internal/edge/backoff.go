package edge

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/internal/throttle"
)

// Backoff says how long a client address is still refused at accept
// (0: it is not): one whose connection the gateway cut for flooding
// (gateway.flood_backoff, see internal/penalty). It must be safe for
// concurrent use and cheap: it is asked for every connection accepted.
type Backoff interface {
	Left(ip netip.Addr, now time.Time) time.Duration
}

// floodLogEvery is the shortest interval between two log lines about
// connections refused for a flood, per listener; the lines carry a count.
const floodLogEvery = time.Second

// WithBackoff has l refuse the connections of the addresses b refuses,
// at accept, before any other limit and before the TLS handshake: on a
// TLS listener the socket is closed without an answer (one would need
// the handshake the refusal is there to save), on a plain one it is
// answered 429 with a Retry-After of the refusal left. Each is counted
// (Metrics.Refused "flood_backoff") and written to the access log, and
// logged at most once a second with a count. Call it before Accept.
func (l *Listener) WithBackoff(b Backoff) *Listener {
	l.backoff = b
	return l
}

// refusedForFlood refuses c, from ip, if ip is refused for a flood, and
// reports whether it did. It never blocks the accept loop.
func (l *Listener) refusedForFlood(c net.Conn, ip netip.Addr) bool {
	if l.backoff == nil {
		return false
	}
	left := l.backoff.Left(ip, time.Now())
	if left <= 0 {
		return false
	}
	defer l.metrics.Refused("flood_backoff")
	if l.access != nil {
		l.access.Connection(c, fasthttp.StatusTooManyRequests, "flood_backoff")
	}
	l.floodLog.refused(l.log, l.Addr().String(), ip, left)
	if l.tls == nil {
		_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
		secs := int((left + time.Second - 1) / time.Second)
		_, _ = c.Write(refusal(fasthttp.StatusTooManyRequests, "your address flooded the gateway lately: refused for a while", secs))
	}
	closeDrained(c)
	return true
}

// floodLog writes a listener's lines about connections refused for a
// flood: at most one per floodLogEvery, with the count since the last.
// It is safe for concurrent use (the PROXY header readers refuse too).
type floodLog struct {
	mu    sync.Mutex
	lines throttle.Lines
}

func (f *floodLog) refused(log *slog.Logger, addr string, ip netip.Addr, left time.Duration) {
	f.mu.Lock()
	n, ok := f.lines.Note(time.Now(), floodLogEvery)
	f.mu.Unlock()
	if ok {
		log.Warn("connections refused from an address cut for flooding (gateway.flood_backoff)",
			"addr", addr, "client", ip.String(), "left", left.Round(time.Millisecond), "refused", n)
	}
}
