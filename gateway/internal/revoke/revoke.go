// Package revoke enforces credential revocations: a revoked subject (every
// credential of a principal) or key (one credential) has its live tunnels
// closed with 1008 and is refused new handshakes until its TTL passes,
// whatever a cached auth decision says. With a revocation Redis
// (gateway.revoke_redis) the gateway replicas share them: each revocation
// is stored in a sorted set, so a replica that starts or reconnects later
// loads it, and published on a channel, so every replica applies it now.
//
// The package closes tunnels through the Closer it is given and counts
// them on a Counter; it knows nothing else of the gateway.
package revoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/internal/redact"
)

// Channel is the Redis channel gateway replicas share revocations on.
const Channel = "wsgate:revoke"

// SetKey is the Redis sorted set holding every revocation in force:
// members are "s:SUBJECT" and "k:CREDENTIAL-ID", scores their expiry in
// Unix milliseconds (by the clock of the gateway that revoked).
const SetKey = "wsgate:revoked"

// DefaultTTL is how long a revoked subject is refused new handshakes
// when the revocation names no ttl: longer than the credentials a plugin
// would cache a decision for.
const DefaultTTL = 24 * time.Hour

// maxRevoked bounds the subjects remembered as revoked; the ones that
// expire soonest make room first.
const maxRevoked = 100_000

// Closer closes the live tunnels of a subject, or of the credential key,
// with 1008 and returns how many there were; an empty argument matches
// nothing. *registry.Tunnels is one.
type Closer interface {
	Revoke(subject, key string) int
}

// Counter counts the tunnels revocations close (the gateway's
// wsgate_revoked_tunnels_total); a prometheus.Counter is one.
type Counter interface {
	Add(float64)
}

// Revocation names a subject (every credential of a principal) or a key
// (one credential, by the id its plugin gives it) whose tunnels must close
// and who may not come back for TTL (default DefaultTTL), whatever a
// cached decision says. It is also the message replicas share on Channel.
type Revocation struct {
	Subject string `json:"subject,omitempty"`
	Key     string `json:"key,omitempty"`
	TTL     string `json:"ttl,omitempty"` // a duration such as "1h"
}

// Revoker holds the revocations in force and applies new ones, alone or
// shared with other replicas through Redis once Start was given one. It is
// made by New; Revoke and Revoked are safe for concurrent use, Start and
// Stop are called once each, by the gateway's lifecycle.
type Revoker struct {
	log     *slog.Logger
	tunnels Closer
	closed  Counter

	bus *redis.Client // revocations shared with other replicas
	sub *redis.PubSub
	set revokedSet // subjects refused new handshakes
}

// New returns a Revoker that closes tunnels through tunnels, counts them
// on closed and logs to log. It shares nothing until Start.
func New(log *slog.Logger, tunnels Closer, closed Counter) *Revoker {
	return &Revoker{log: log, tunnels: tunnels, closed: closed}
}

// Start shares revocations on the Redis at url when the config names one
// ("" = none): it subscribes to the revocation channel and, once
// subscribed, loads every revocation in force from Redis, so one made
// before this gateway started is enforced from its first handshake. A
// failure to do either fails the start.
func (v *Revoker) Start(url string) error {
	if url == "" {
		return nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("gateway.revoke_redis: %w", err)
	}
	v.bus = redis.NewClient(opts)
	sub := v.bus.Subscribe(context.Background(), Channel)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fail := func(err error) error {
		_ = sub.Close()
		_ = v.bus.Close()
		v.bus = nil
		return err
	}
	// Subscribed first, loaded second: a revocation stored after the load
	// read the set is published after the subscription, so it arrives.
	if _, err := sub.Receive(ctx); err != nil {
		return fail(fmt.Errorf("subscribe to revocations on %s: %w", redact.URL(url), err))
	}
	if _, _, err := v.load(ctx); err != nil {
		return fail(fmt.Errorf("load revocations from %s: %w", redact.URL(url), err))
	}
	v.sub = sub
	resync := make(chan struct{}, 1)
	go v.resync(resync)
	go v.receive(sub.ChannelWithSubscriptions(redis.WithChannelSize(channelSize)), resync)
	return nil
}

// Stop closes the subscription and the Redis client Start opened, which
// ends the goroutines receiving and reloading revocations. It does nothing
// when Start shared nothing.
func (v *Revoker) Stop() {
	if v.sub != nil {
		_ = v.sub.Close()
		_ = v.bus.Close()
	}
}

// channelSize is how many revocation messages may wait for the
// receiving goroutine before go-redis starts to hold them back.
const channelSize = 1024

// receive applies every revocation published by any replica.
// The pub/sub channel is at most once: what is published while the
// connection is down is lost to it. go-redis resubscribes after a
// reconnect, and the confirmation it then delivers asks for a resync from
// the stored set, which every revocation reaches before it is published.
func (v *Revoker) receive(ch <-chan any, resync chan<- struct{}) {
	defer close(resync)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			v.log.Info("revocation channel subscribed again after a reconnect; reloading revocations")
			select {
			case resync <- struct{}{}:
			default: // one is pending already: it will read the set after this point
			}
		case *redis.Message:
			var r Revocation
			if err := json.Unmarshal([]byte(m.Payload), &r); err != nil || (r.Subject == "" && r.Key == "") {
				v.log.Warn("ignored malformed revocation", "payload", m.Payload)
				continue
			}
			v.apply(r)
		}
	}
}

// resyncRetry is how long resync waits between failed loads.
const resyncRetry = 500 * time.Millisecond

// resync loads the stored revocations each time one is asked for,
// retrying a failed load until it succeeds, the client is closed, or the
// channel closes. It runs apart from receive so published revocations
// keep being applied while Redis is flaky.
func (v *Revoker) resync(resync <-chan struct{}) {
	for range resync {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			loaded, closed, err := v.load(ctx)
			cancel()
			if err == nil {
				v.log.Info("revocations reloaded", "in_force", loaded, "tunnels", closed)
				break
			}
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			v.log.Warn("reloading revocations after a reconnect failed; retrying", "err", err)
			time.Sleep(resyncRetry)
		}
	}
}

// load reads the revocations in force from Redis (the maxRevoked that
// expire last) into the revoked set, closes the tunnels of those it did
// not hold yet, and returns how many it read and how many tunnels it
// closed.
func (v *Revoker) load(ctx context.Context) (loaded, closed int, err error) {
	now := time.Now()
	zs, err := v.bus.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key:     SetKey,
		Start:   "+inf",
		Stop:    "(" + strconv.FormatInt(now.UnixMilli(), 10),
		ByScore: true,
		Rev:     true,
		Count:   maxRevoked,
	}).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", SetKey, err)
	}
	for _, z := range zs {
		name, _ := z.Member.(string)
		if len(name) <= 2 || (name[:2] != "s:" && name[:2] != "k:") {
			continue
		}
		if !v.set.add(name, time.UnixMilli(int64(z.Score))) {
			continue // applied already, tunnels and all
		}
		var n int
		if name[0] == 's' {
			n = v.tunnels.Revoke(name[2:], "")
		} else {
			n = v.tunnels.Revoke("", name[2:])
		}
		v.closed.Add(float64(n))
		closed += n
	}
	return len(zs), closed, nil
}

// Revoked reports whether subject, or the credential key, is revoked now;
// an empty argument is never revoked.
func (v *Revoker) Revoked(subject, key string) bool {
	return v.set.has("s:"+subject) || v.set.has("k:"+key)
}

// Revoke closes the tunnels of r's subject here or, with a revocation
// Redis, stores r there until it expires and publishes it, in one
// transaction, so that every replica (this one included) applies it now
// and one that misses the message (starting, or reconnecting) loads it.
func (v *Revoker) Revoke(r Revocation) (published bool, closed int, err error) {
	if r.Subject == "" && r.Key == "" {
		return false, 0, errors.New("name a subject or a key")
	}
	ttl, err := r.ttl()
	if err != nil {
		return false, 0, err
	}
	if v.bus == nil {
		return false, v.apply(r), nil
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
	_, err = v.bus.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddArgs(ctx, SetKey, redis.ZAddArgs{GT: true, Members: members}) // never shortens one in force
		p.ZRemRangeByScore(ctx, SetKey, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		p.ZRemRangeByRank(ctx, SetKey, 0, -maxRevoked-1) // those expiring soonest make room
		p.Publish(ctx, Channel, b)
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("store and publish revocation: %w", err)
	}
	return true, 0, nil
}

// ttl is how long r refuses its subject.
func (r Revocation) ttl() (time.Duration, error) {
	if r.TTL == "" {
		return DefaultTTL, nil
	}
	d, err := time.ParseDuration(r.TTL)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("ttl must be a positive duration such as \"1h\", got %q", r.TTL)
	}
	return d, nil
}

// apply refuses r's subject and key for r's TTL (DefaultTTL when it is
// not a valid one) and closes their tunnels here, returning how many.
func (v *Revoker) apply(r Revocation) int {
	ttl, err := r.ttl()
	if err != nil {
		ttl = DefaultTTL
	}
	until := time.Now().Add(ttl)
	if r.Subject != "" {
		v.set.add("s:"+r.Subject, until)
	}
	if r.Key != "" {
		v.set.add("k:"+r.Key, until)
	}
	n := v.tunnels.Revoke(r.Subject, r.Key)
	v.closed.Add(float64(n))
	v.log.Info("revoked", "subject", r.Subject, "key", r.Key, "tunnels", n)
	return n
}
