package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/plugins/auth"
)

// slot is one [[plugins]] entry: its current instance, and a supervisor
// that replaces the instance when it crashes or hangs. A slot's spec never
// changes (a reload that changes path, sha256 or config builds a new slot);
// only its timeout does. It is safe for concurrent use.
type slot struct {
	h        *Host
	spec     conf.Plugin
	timeout  atomic.Int64 // per-call timeout, ns
	timeouts atomic.Int32 // consecutive call timeouts
	cur      atomic.Pointer[instance]
	kick     chan struct{} // wakes the supervisor to look at cur
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed when the supervisor returns
}

func newSlot(h *Host, spec conf.Plugin, in *instance) *slot {
	s := &slot{h: h, spec: spec, kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.timeout.Store(int64(callTimeout(spec)))
	s.cur.Store(in)
	go s.supervise()
	return s
}

// wake asks the supervisor to check the current instance.
func (s *slot) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// supervise waits for the current instance to exit or be found hung, then
// restarts it with backoff (BackoffMin doubling to BackoffMax; reset once
// an instance has lived longer than BackoffMax). It returns when the slot
// is closed.
func (s *slot) supervise() {
	defer close(s.done)
	o := &s.h.opts
	backoff := o.BackoffMin
	for {
		in := s.cur.Load()
		select {
		case <-s.ctx.Done():
			return
		case <-in.auth.Done():
		case <-s.kick:
			if !in.exited() {
				continue
			}
		}
		s.cur.CompareAndSwap(in, nil)
		if in.hung.Load() {
			o.Logger.Error("auth plugin hung: killing it", "plugin", s.spec.Name, "plugin_pid", in.pid, "timeouts", s.timeouts.Load())
		} else {
			o.Logger.Error("auth plugin exited", "plugin", s.spec.Name, "plugin_pid", in.pid)
		}
		in.retire(0)
		if time.Since(in.started) > o.BackoffMax {
			backoff = o.BackoffMin
		}
		next, ok := s.restart(&backoff)
		if !ok {
			return
		}
		s.timeouts.Store(0)
		s.cur.Store(next)
		o.Logger.Info("auth plugin restarted", "plugin", s.spec.Name, "plugin_pid", next.pid)
	}
}

// restart starts a new instance, waiting *backoff before each try and
// doubling it after. It gives up only when the slot is closed.
func (s *slot) restart(backoff *time.Duration) (*instance, bool) {
	o := &s.h.opts
	t := time.NewTimer(*backoff)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return nil, false
		case <-t.C:
		}
		*backoff = min(*backoff*2, o.BackoffMax)
		ctx, cancel := context.WithTimeout(s.ctx, o.StartTimeout)
		in, err := startInstance(ctx, s.spec, o)
		cancel()
		if err == nil {
			if s.ctx.Err() != nil {
				in.stop()
				return nil, false
			}
			return in, true
		}
		o.Logger.Error("auth plugin restart failed", "plugin", s.spec.Name, "err", err, "retry_in", *backoff)
		t.Reset(*backoff)
	}
}

// close stops the supervisor and retires the current instance.
func (s *slot) close() {
	s.cancel()
	<-s.done
	if in := s.cur.Swap(nil); in != nil {
		in.retire(time.Duration(s.timeout.Load()) + time.Second)
	}
}

// current returns the instance to call, acquired, or nil when there is
// none running.
func (s *slot) current() *instance {
	for range 3 { // a reload or restart may retire the one just loaded
		in := s.cur.Load()
		if in == nil || in.exited() {
			return nil
		}
		if in.acquire() {
			return in
		}
	}
	return nil
}

// decide returns the plugin's decision for req: from the cache when the
// plugin allows it, else by calling the process.
func (s *slot) decide(ctx context.Context, req *auth.Request, ks *keyScratch) (*auth.Decision, error) {
	o := &s.h.opts
	name := s.spec.Name
	in := s.current()
	if in == nil {
		s.wake()
		o.Observer.Observe(name, OutcomeUnavailable, false, 0)
		return nil, fmt.Errorf("%w: %q is not running", ErrUnavailable, name)
	}
	defer in.release()
	var key cacheKey
	if in.keyParts != nil {
		key = cacheKey{gen: in.gen, sum: ks.sum(in.keyParts, req)}
		if d, ok := s.h.cache.get(key, time.Now()); ok {
			o.Observer.Observe(name, outcomeOf(d), true, 0)
			return d, nil
		}
	}
	timeout := time.Duration(s.timeout.Load())
	cctx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	d, err := in.auth.Authenticate(cctx, req)
	cancel()
	lat := time.Since(start)
	if err != nil {
		return nil, s.callError(ctx, in, err, timeout, lat)
	}
	s.timeouts.Store(0)
	if err := checkDecision(d); err != nil {
		o.Observer.Observe(name, OutcomeError, false, lat)
		return nil, fmt.Errorf("%w: %q: %w", ErrBadDecision, name, err)
	}
	o.Observer.Observe(name, outcomeOf(d), false, lat)
	if in.keyParts != nil && d.CacheTTL > 0 {
		now := time.Now()
		until := now.Add(d.CacheTTL)
		if !d.Expires.IsZero() && d.Expires.Before(until) {
			until = d.Expires
		}
		if until.After(now) {
			s.h.cache.put(key, d, until)
		}
	}
	return d, nil
}

// callError classifies a failed call, reports it, and returns the error
// for Authenticate. A timeout counts towards HangAfter; a broken transport
// wakes the supervisor.
func (s *slot) callError(ctx context.Context, in *instance, err error, timeout, lat time.Duration) error {
	o := &s.h.opts
	name := s.spec.Name
	switch {
	case ctx.Err() != nil: // the caller gave up; not the plugin's fault
		o.Observer.Observe(name, OutcomeError, false, lat)
		return fmt.Errorf("auth plugin %q: %w", name, err)
	// A timeout: our deadline passed. gRPC may report it (as its own
	// DeadlineExceeded status) a moment before the context says so, which
	// reads like the plugin's own deadline error; the time taken tells.
	case errors.Is(err, context.DeadlineExceeded) && (!errors.Is(err, auth.ErrPlugin) || lat >= timeout*9/10):
		if n := s.timeouts.Add(1); int(n) >= o.HangAfter {
			in.hung.Store(true)
			s.wake()
		}
		o.Observer.Observe(name, OutcomeUnavailable, false, lat)
		return fmt.Errorf("%w: %q timed out after %v", ErrUnavailable, name, timeout)
	case errors.Is(err, auth.ErrTransport):
		s.wake()
		o.Observer.Observe(name, OutcomeUnavailable, false, lat)
		return fmt.Errorf("%w: %q: %w", ErrUnavailable, name, err)
	default:
		o.Observer.Observe(name, OutcomeError, false, lat)
		return fmt.Errorf("auth plugin %q: %w", name, err)
	}
}

func outcomeOf(d *auth.Decision) Outcome {
	if d.Allow {
		return OutcomeAllow
	}
	return OutcomeDeny
}

// checkDecision enforces the contract on a plugin's answer, and fills in
// the deny status default. The gateway writes header names and values into
// the upstream request as they are, so anything that could end a header
// line is refused.
func checkDecision(d *auth.Decision) error {
	if !d.Allow {
		if d.Status == 0 {
			d.Status = 403
		}
		if d.Status < 400 || d.Status > 599 {
			return fmt.Errorf("deny status %d is not 400-599", d.Status)
		}
		if d.Reason == "" {
			d.Reason = "denied"
		}
		if !validHeaderValue(d.Reason) {
			return fmt.Errorf("deny reason %q has control characters", d.Reason)
		}
	}
	for k, v := range d.Headers {
		if !validHeaderName(k) {
			return fmt.Errorf("header name %q is not an HTTP token", k)
		}
		if !validHeaderValue(v) {
			return fmt.Errorf("header %s: value has control characters", k)
		}
	}
	for k, v := range d.ResponseHeaders {
		if !validHeaderName(k) {
			return fmt.Errorf("response header name %q is not an HTTP token", k)
		}
		if !denyHeader(k) {
			return fmt.Errorf("response header %s is not one a deny may set (WWW-Authenticate, Retry-After, Cache-Control, X-*)", k)
		}
		if !validHeaderValue(v) {
			return fmt.Errorf("response header %s: value has control characters", k)
		}
	}
	return nil
}

// denyHeader reports whether a plugin may set k on the gateway's answer
// to a client it refuses, whatever the case of k: a challenge
// (WWW-Authenticate), when to come back (Retry-After), whether to keep
// the answer (Cache-Control), and names of its own starting with X- ("X-"
// alone is not one). Any other name is the gateway's: it could frame the
// answer (Content-Length, Transfer-Encoding, Trailer), change the
// connection (Connection, Upgrade, Keep-Alive), recode the plain-text
// body (Content-Encoding, Content-Type) or reach past this answer
// (Set-Cookie on the gateway's origin).
func denyHeader(k string) bool {
	if len(k) > 2 && strings.EqualFold(k[:2], "X-") {
		return true
	}
	return strings.EqualFold(k, "WWW-Authenticate") || strings.EqualFold(k, "Retry-After") || strings.EqualFold(k, "Cache-Control")
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 0x80 || c <= ' ' || c == 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
