package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/plugins/auth"
)

// revokeChannel is the Redis channel gateway replicas share revocations on.
const revokeChannel = "wsgate:revoke"

// authorize runs the route's auth chain for a handshake. On a deny or when
// a plugin gives no decision it answers the client itself (the plugin's
// status, or 503: fail closed) and returns false.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route) (pluginhost.Result, bool) {
	if len(rt.Auth) == 0 {
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
		TLS:        tlsInfo(ctx),
		Route:      rt.Name,
	}
	for k, v := range h.All() {
		req.Header.Add(string(k), string(v))
	}
	cctx, cancel := context.WithTimeout(context.Background(), g.handshakeTimeout)
	defer cancel()
	res, err := s.plugins.Authenticate(cctx, rt.Auth, req)
	switch {
	case err != nil:
		s.log.Warn("auth plugin gave no decision; refusing (fail closed)", "route", rt.Name, "err", err)
		s.retryLater(ctx, fasthttp.StatusServiceUnavailable, "auth_unavailable", "authentication unavailable")
		return res, false
	case !res.Allow:
		s.reject(ctx, res.Status, "auth_denied", res.Reason)
		setDenyHeaders(ctx, res.Status, res.ResponseHeaders)
		return res, false
	case s.revoked.has("s:"+res.Subject) || s.revoked.has("k:"+res.CredentialID):
		s.reject(ctx, fasthttp.StatusUnauthorized, "auth_denied", "credential revoked")
		setDenyHeaders(ctx, fasthttp.StatusUnauthorized, nil)
		return res, false
	}
	return res, true
}

// defaultChallenge is the WWW-Authenticate of a 401 whose plugin set
// none: a 401 must carry one (RFC 9110, section 15.5.2).
const defaultChallenge = `Bearer realm="wsgate"`

// setDenyHeaders sets a deny answer's headers: the plugin's (checked by
// pluginhost: names a deny may set, no control characters), and on
// a 401 without a challenge, defaultChallenge. It runs after reject,
// which resets the response headers.
func setDenyHeaders(ctx *fasthttp.RequestCtx, status int, headers map[string]string) {
	challenged := false
	for k, v := range headers {
		ctx.Response.Header.Set(k, v)
		challenged = challenged || strings.EqualFold(k, "WWW-Authenticate")
	}
	if status == fasthttp.StatusUnauthorized && !challenged {
		ctx.Response.Header.Set("WWW-Authenticate", defaultChallenge)
	}
}

// startRevocations shares revocations on the Redis at url when the config
// names one: it subscribes to the revocation channel and, once subscribed,
// loads every revocation in force from Redis, so one made before this
// gateway started is enforced from its first handshake. A failure to do
// either fails the start.
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
	fail := func(err error) error {
		_ = sub.Close()
		_ = s.revokeBus.Close()
		s.revokeBus = nil
		return err
	}
	// Subscribed first, loaded second: a revocation stored after the load
	// read the set is published after the subscription, so it arrives.
	if _, err := sub.Receive(ctx); err != nil {
		return fail(fmt.Errorf("subscribe to revocations on %s: %w", admin.RedactURL(url), err))
	}
	if _, _, err := s.loadRevocations(ctx); err != nil {
		return fail(fmt.Errorf("load revocations from %s: %w", admin.RedactURL(url), err))
	}
	s.revokeSub = sub
	resync := make(chan struct{}, 1)
	go s.resyncRevocations(resync)
	go s.receiveRevocations(sub.ChannelWithSubscriptions(redis.WithChannelSize(revokeChannelSize)), resync)
	return nil
}

// revokeChannelSize is how many revocation messages may wait for the
// receiving goroutine before go-redis starts to hold them back.
const revokeChannelSize = 1024

// receiveRevocations applies every revocation published by any replica.
// The pub/sub channel is at most once: what is published while the
// connection is down is lost to it. go-redis resubscribes after a
// reconnect, and the confirmation it then delivers asks for a resync from
// the stored set, which every revocation reaches before it is published.
func (s *Server) receiveRevocations(ch <-chan any, resync chan<- struct{}) {
	defer close(resync)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			s.log.Info("revocation channel subscribed again after a reconnect; reloading revocations")
			select {
			case resync <- struct{}{}:
			default: // one is pending already: it will read the set after this point
			}
		case *redis.Message:
			var r revocation
			if err := json.Unmarshal([]byte(m.Payload), &r); err != nil || (r.Subject == "" && r.Key == "") {
				s.log.Warn("ignored malformed revocation", "payload", m.Payload)
				continue
			}
			s.applyRevocation(r)
		}
	}
}

// resyncRetry is how long resyncRevocations waits between failed loads.
const resyncRetry = 500 * time.Millisecond

// resyncRevocations loads the stored revocations each time one is asked
// for, retrying a failed load until it succeeds, the client is closed, or
// the channel closes. It runs apart from receiveRevocations so published
// revocations keep being applied while Redis is flaky.
func (s *Server) resyncRevocations(resync <-chan struct{}) {
	for range resync {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			loaded, closed, err := s.loadRevocations(ctx)
			cancel()
			if err == nil {
				s.log.Info("revocations reloaded", "in_force", loaded, "tunnels", closed)
				break
			}
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			s.log.Warn("reloading revocations after a reconnect failed; retrying", "err", err)
			time.Sleep(resyncRetry)
		}
	}
}

// revokedKey is the Redis sorted set holding every revocation in force:
// members are "s:SUBJECT" and "k:CREDENTIAL-ID", scores their expiry in
// Unix milliseconds (by the clock of the gateway that revoked).
const revokedKey = "wsgate:revoked"

// loadRevocations reads the revocations in force from Redis (the
// maxRevoked that expire last) into the revoked set, closes the tunnels of
// those it did not hold yet, and returns how many it read and how many
// tunnels it closed.
func (s *Server) loadRevocations(ctx context.Context) (loaded, closed int, err error) {
	now := time.Now()
	zs, err := s.revokeBus.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key:     revokedKey,
		Start:   "+inf",
		Stop:    "(" + strconv.FormatInt(now.UnixMilli(), 10),
		ByScore: true,
		Rev:     true,
		Count:   maxRevoked,
	}).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", revokedKey, err)
	}
	for _, z := range zs {
		name, _ := z.Member.(string)
		if len(name) <= 2 || (name[:2] != "s:" && name[:2] != "k:") {
			continue
		}
		if !s.revoked.add(name, time.UnixMilli(int64(z.Score))) {
			continue // applied already, tunnels and all
		}
		var n int
		if name[0] == 's' {
			n = s.tunnels.Revoke(name[2:], "")
		} else {
			n = s.tunnels.Revoke("", name[2:])
		}
		s.metrics.Revocations.Add(float64(n))
		closed += n
	}
	return len(zs), closed, nil
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

// add refuses subject (a "s:" or "k:" name) until the later of until and
// what it held for it, and reports whether subject was not refused before.
func (r *revokedSet) add(subject string, until time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.until == nil {
		r.until = make(map[string]time.Time)
	}
	if u, ok := r.until[subject]; ok {
		if until.After(u) {
			r.until[subject] = until
		}
		return !time.Now().Before(u)
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
	return true
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

// revoke closes the tunnels of r's subject here or, with a revocation
// Redis, stores r there until it expires and publishes it, in one
// transaction, so that every replica (this one included) applies it now
// and one that misses the message (starting, or reconnecting) loads it.
func (s *Server) revoke(r revocation) (published bool, closed int, err error) {
	if r.Subject == "" && r.Key == "" {
		return false, 0, errors.New("name a subject or a key")
	}
	ttl, err := r.ttl()
	if err != nil {
		return false, 0, err
	}
	if s.revokeBus == nil {
		return false, s.applyRevocation(r), nil
	}
	b, _ := json.Marshal(r)
	now := time.Now()
	until := float64(now.Add(ttl).UnixMilli())
	var members []redis.Z
	if r.Subject != "" {
		members = append(members, redis.Z{Score: until, Member: "s:" + r.Subject})
	}
	if r.Key != "" {
		members = append(members, redis.Z{Score: until, Member: "k:" + r.Key})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = s.revokeBus.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddArgs(ctx, revokedKey, redis.ZAddArgs{GT: true, Members: members}) // never shortens one in force
		p.ZRemRangeByScore(ctx, revokedKey, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		p.ZRemRangeByRank(ctx, revokedKey, 0, -maxRevoked-1) // those expiring soonest make room
		p.Publish(ctx, revokeChannel, b)
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("store and publish revocation: %w", err)
	}
	return true, 0, nil
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
	n := s.tunnels.Revoke(r.Subject, r.Key)
	s.metrics.Revocations.Add(float64(n))
	s.log.Info("revoked", "subject", r.Subject, "key", r.Key, "tunnels", n)
	return n
}
