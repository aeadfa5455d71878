package admit

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// bucket is a token bucket: it fills at rate tokens a second up to burst,
// and starts full. It is not safe for concurrent use: its owner locks.
type bucket struct {
	tokens float64
	last   time.Time // zero: never used, full
}

// take takes a token at now if there is one, for a bucket of rate and burst.
func (b *bucket) take(now time.Time, rate, burst int) bool {
	if b.last.IsZero() {
		b.tokens = float64(burst)
	} else if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(float64(burst), b.tokens+dt.Seconds()*float64(rate))
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// full reports whether the bucket is back to burst at now, so forgetting
// it changes nothing.
func (b *bucket) full(now time.Time, rate, burst int) bool {
	return b.tokens+now.Sub(b.last).Seconds()*float64(rate) >= float64(burst)
}

// PoolRate is a pool's [pools.admission] rate: a token bucket shared by
// every request to the pool; rate 0 admits everything. The pool carries
// it from one generation to the next, so it keeps its tokens when a
// reload changes its rate and burst. It is safe for concurrent use.
type PoolRate struct {
	rateConf
	b bucket
}

// rateConf is a limit's rate and burst, which a reload changes, with
// whether it is on readable without the lock.
type rateConf struct {
	on          atomic.Bool // rate > 0
	mu          sync.Mutex
	rate, burst int
}

// lock takes the lock and reports true when the limit is on; when it is
// off it reports false and leaves the lock alone.
func (c *rateConf) lock() bool {
	if !c.on.Load() {
		return false
	}
	c.mu.Lock()
	if c.rate <= 0 {
		c.mu.Unlock()
		return false
	}
	return true
}

// NewPoolRate returns a pool's admission rate at rate and burst.
func NewPoolRate(rate, burst int) *PoolRate {
	r := &PoolRate{}
	r.Set(rate, burst)
	return r
}

// Set changes the rate and burst for the next requests.
func (r *PoolRate) Set(rate, burst int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rate, r.burst = rate, burst
	r.b.tokens = min(r.b.tokens, float64(burst))
	r.on.Store(rate > 0)
}

// Allow takes a token, or reports false with the rate and burst in force.
func (r *PoolRate) Allow() (ok bool, rate, burst int) {
	if !r.lock() {
		return true, 0, 0
	}
	defer r.mu.Unlock()
	return r.b.take(time.Now(), r.rate, r.burst), r.rate, r.burst
}

var _ upstream.Admission = (*PoolRate)(nil)

// PoolAdmission is the last step of admission: a token from the route's
// pool's admission rate (rt.Pool.Admit, a PoolRate), so only requests
// that would reach a node take one and a flood of bad or unauthorized
// requests does not use up the pool's. A handshake it refuses is answered
// as the route's overflow says (see Overflow), a plain request 503; both
// with a Retry-After jittered from retryAfter.
func PoolAdmission(rt *route.Route, handshake bool, retryAfter int, handshakeTimeout time.Duration) Refusal {
	ok, rate, burst := rt.Pool.Admit.Allow()
	if ok {
		return Refusal{}
	}
	retry := JitteredRetryAfter(retryAfter, rate, burst)
	const msg = "the pool is admitting new clients at a limited rate"
	if handshake {
		return Overflow(rt, "admission", msg, retry, handshakeTimeout)
	}
	return RetryLater(fasthttp.StatusServiceUnavailable, "admission", msg, retry)
}

// IPRate is handshake_rate_per_ip: a token bucket per client address. A
// bucket that has filled up again is forgotten (a fresh one is the same),
// swept at most once per refill time, so memory follows the addresses
// seen within the last refill time. It is safe for concurrent use.
type IPRate struct {
	rateConf
	byIP  map[netip.Addr]*bucket
	swept time.Time
}

// NewIPRate returns a per-address rate of rate and burst.
func NewIPRate(rate, burst int) *IPRate {
	r := &IPRate{byIP: make(map[netip.Addr]*bucket)}
	r.Set(rate, burst)
	return r
}

// Set changes the rate and burst for the next requests; rate 0 turns the
// limit off and forgets every address.
func (r *IPRate) Set(rate, burst int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rate, r.burst = rate, burst
	if rate <= 0 {
		clear(r.byIP)
	}
	r.on.Store(rate > 0)
}

// Allow takes a token from ip's bucket, or reports false with the rate
// and burst in force.
func (r *IPRate) Allow(ip netip.Addr) (ok bool, rate, burst int) {
	if !r.lock() {
		return true, 0, 0
	}
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.swept) >= max(time.Second, refill(r.rate, r.burst)) {
		r.swept = now
		for a, b := range r.byIP {
			if b.full(now, r.rate, r.burst) {
				delete(r.byIP, a)
			}
		}
	}
	b := r.byIP[ip]
	if b == nil {
		b = &bucket{}
		r.byIP[ip] = b
	}
	return b.take(now, r.rate, r.burst), r.rate, r.burst
}

// Check is the per-IP step of admission: a token from the bucket of the
// request's client address, or 429 with a Retry-After jittered from
// retryAfter.
func (r *IPRate) Check(ip netip.Addr, retryAfter int) Refusal {
	if ok, rate, burst := r.Allow(ip); !ok {
		return RetryLater(fasthttp.StatusTooManyRequests, "ip_rate", "too many requests from your address",
			JitteredRetryAfter(retryAfter, rate, burst))
	}
	return Refusal{}
}

// tracked is the number of addresses with a bucket.
func (r *IPRate) tracked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byIP)
}

// refill is the time an empty bucket of rate and burst takes to fill.
func refill(rate, burst int) time.Duration {
	return time.Duration(float64(burst) / float64(rate) * float64(time.Second))
}

// JitteredRetryAfter is the Retry-After, in whole seconds, of a request
// refused by a token bucket of rate and burst: drawn uniformly from
// [base, base + ⌈burst / rate⌉], so the clients a storm refuses come back
// spread over about the time the bucket takes to refill rather than
// together.
func JitteredRetryAfter(base, rate, burst int) int {
	spread := 1
	if rate > 0 {
		spread = max(1, int(math.Ceil(float64(burst)/float64(rate))))
	}
	return base + rand.IntN(spread+1)
}
