package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/plugins/auth"
)

// revokeChannel is the Redis channel gateway replicas share revocations on.
const revokeChannel = "wsgate:revoke"

// authorize runs the route's auth chain for a handshake. On a deny or when
// a plugin gives no decision it answers the client itself (the plugin's
// status, or 503: fail closed) and returns false.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, g *generation, rt *route) (pluginhost.Result, bool) {
	if len(rt.auth) == 0 {
		return pluginhost.Result{Allow: true}, true
	}
	h := &ctx.Request.Header
	req := &auth.Request{
		Method:     string(ctx.Method()),
		Host:       string(ctx.Host()),
		Path:       string(ctx.Path()),
		RawQuery:   string(ctx.URI().QueryString()),
		Header:     make(http.Header),
		ClientAddr: ctx.RemoteAddr().String(),
		Route:      rt.name,
	}
	for k, v := range h.All() {
		req.Header.Add(string(k), string(v))
	}
	cctx, cancel := context.WithTimeout(context.Background(), g.handshakeTimeout)
	defer cancel()
	res, err := s.plugins.Authenticate(cctx, rt.auth, req)
	switch {
	case err != nil:
		s.log.Warn("auth plugin gave no decision; refusing (fail closed)", "route", rt.name, "err", err)
		s.retryLater(ctx, fasthttp.StatusServiceUnavailable, "auth_unavailable", "authentication unavailable")
		return res, false
	case !res.Allow:
		s.reject(ctx, res.Status, "auth_denied", res.Reason)
		return res, false
	case s.revoked.has("s:"+res.Subject) || s.revoked.has("k:"+res.CredentialID):
		s.reject(ctx, fasthttp.StatusUnauthorized, "auth_denied", "credential revoked")
		return res, false
	}
	return res, true
}

// startRevocations subscribes to the shared revocation channel when the
// config names one.
func (s *Server) startRevocations(url string) error {
	if url == "" {
		return nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("gateway.revoke_redis: %w", err)
	}
	s.revokeBus = redis.NewClient(opts)
	sub := s.revokeBus.Subscribe(context.Background(), revokeChannel)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		_ = s.revokeBus.Close()
		s.revokeBus = nil
		return fmt.Errorf("subscribe to revocations on %s: %w", redactURL(url), err)
	}
	s.revokeSub = sub
	go s.receiveRevocations(sub.Channel())
	return nil
}

// receiveRevocations applies every revocation published by any replica.
func (s *Server) receiveRevocations(ch <-chan *redis.Message) {
	for m := range ch {
		var r revocation
		if err := json.Unmarshal([]byte(m.Payload), &r); err != nil || (r.Subject == "" && r.Key == "") {
			s.log.Warn("ignored malformed revocation", "payload", m.Payload)
			continue
		}
		s.applyRevocation(r)
	}
}

// revocation names a subject (every credential of a principal) or a key
// (one credential, by the id its plugin gives it) whose tunnels must close
// and who may not come back for TTL (default DefaultRevokeTTL), whatever a
// cached decision says.
type revocation struct {
	Subject string `json:"subject,omitempty"`
	Key     string `json:"key,omitempty"`
	TTL     string `json:"ttl,omitempty"` // a duration such as "1h"
}

// DefaultRevokeTTL is how long a revoked subject is refused new handshakes
// when the revocation names no ttl: longer than the credentials a plugin
// would cache a decision for.
const DefaultRevokeTTL = 24 * time.Hour

// maxRevoked bounds the subjects remembered as revoked; the ones that
// expire soonest make room first.
const maxRevoked = 100_000

// revokedSet remembers revoked subjects until their TTL passes, so a
// client whose tunnel was closed cannot reconnect on a cached decision.
type revokedSet struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (r *revokedSet) add(subject string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.until == nil {
		r.until = make(map[string]time.Time)
	}
	if len(r.until) >= maxRevoked {
		now := time.Now()
		var soonest string
		for s, u := range r.until {
			if u.Before(now) {
				delete(r.until, s)
			} else if soonest == "" || u.Before(r.until[soonest]) {
				soonest = s
			}
		}
		if len(r.until) >= maxRevoked {
			delete(r.until, soonest)
		}
	}
	r.until[subject] = until
}

// has reports whether subject (a "s:" or "k:" name) is revoked now.
func (r *revokedSet) has(subject string) bool {
	if len(subject) <= 2 { // "s:" or "k:" with nothing after it
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.until[subject]
	if ok && time.Now().After(u) {
		delete(r.until, subject)
		return false
	}
	return ok
}

// revoke closes the tunnels of r's subject here, or publishes r so that
// every replica (this one included) does.
func (s *Server) revoke(r revocation) (published bool, closed int, err error) {
	if r.Subject == "" && r.Key == "" {
		return false, 0, errors.New("name a subject or a key")
	}
	if _, err := r.ttl(); err != nil {
		return false, 0, err
	}
	if s.revokeBus != nil {
		b, _ := json.Marshal(r)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.revokeBus.Publish(ctx, revokeChannel, b).Err(); err != nil {
			return false, 0, fmt.Errorf("publish revocation: %w", err)
		}
		return true, 0, nil
	}
	return false, s.applyRevocation(r), nil
}

// ttl is how long r refuses its subject.
func (r revocation) ttl() (time.Duration, error) {
	if r.TTL == "" {
		return DefaultRevokeTTL, nil
	}
	d, err := time.ParseDuration(r.TTL)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("ttl must be a positive duration such as \"1h\", got %q", r.TTL)
	}
	return d, nil
}

func (s *Server) applyRevocation(r revocation) int {
	ttl, err := r.ttl()
	if err != nil {
		ttl = DefaultRevokeTTL
	}
	until := time.Now().Add(ttl)
	if r.Subject != "" {
		s.revoked.add("s:"+r.Subject, until)
	}
	if r.Key != "" {
		s.revoked.add("k:"+r.Key, until)
	}
	n := s.tunnels.revoke(r.Subject, r.Key)
	s.metrics.revocations.Add(float64(n))
	s.log.Info("revoked", "subject", r.Subject, "key", r.Key, "tunnels", n)
	return n
}
