package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures a Redis bus.
type RedisOptions struct {
	// URL of the Redis server, e.g. "redis://127.0.0.1:6379/0" (required
	// unless Target names another deployment).
	URL string
	// Target names a Redis Cluster or a Sentinel master instead, when URL
	// is empty.
	Target RedisTarget
	// Client, when set, is used instead of URL and Target, and left open
	// by Close: one client shared with the room log, so that a slot map
	// one of them reloaded after a failover serves both.
	Client redis.UniversalClient
	// ChannelPrefix is put before the room id to name its pub/sub channel
	// (default "wsgate:room:").
	ChannelPrefix string
	// ConfirmTimeout bounds how long Subscribe waits for Redis to confirm a
	// new channel subscription (default 5s).
	ConfirmTimeout time.Duration
	// PingInterval is how long the subscriber connection may stay silent
	// before the bus pings it; a ping unanswered for as long again fails
	// the connection, so a server that stopped answering (a partition, a
	// frozen host) is noticed within twice this (default 15s).
	PingInterval time.Duration
	// Logger receives transport errors (default slog.Default()).
	Logger *slog.Logger
}

// Redis is a Bus on Redis pub/sub: one PUBLISH per message, one shared
// subscriber connection per process, one channel per room that has at least
// one local subscription. go-redis reconnects the subscriber connection and
// re-subscribes its channels after a failure; messages published meanwhile
// are lost (pub/sub is at most once), and each re-subscribed channel's
// handlers get a nil message to say so. A failure after which Redis does not
// answer a PING either makes the bus down (State) until the subscriber
// connection works again. Redis is safe for concurrent use.
//
// On a Redis Cluster (RedisTarget.Cluster) the bus uses sharded pub/sub: a
// room's channel is named with the room as its hash tag, "{room}", one
// SPUBLISH per message goes to the shard that owns that slot, and the bus
// keeps one subscriber connection per hash slot that has a local channel
// (SSUBSCRIBE takes channels of one slot per command), closed with the
// slot's last channel. There the bus is down only when no master of the
// cluster answers a PING: one master lost closes nobody, its rooms are
// re-subscribed (with the nil message) once its replica took over.
type Redis struct {
	client  redis.UniversalClient
	owned   bool // Close closes client
	sharded bool
	prefix  string
	confirm time.Duration
	idle    time.Duration
	log     *slog.Logger
	errs    atomic.Uint64
	resubs  atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc

	// cmdMu serialises SUBSCRIBE and UNSUBSCRIBE so that the first and last
	// subscription of a channel reach Redis in the order they were made.
	// It guards shards.
	cmdMu sync.Mutex
	// shards holds the subscriber connections by hash slot: the one made
	// at start under slot 0 for a single server, one per slot with a local
	// channel for a cluster.
	shards map[int]*subscriber

	stMu    sync.Mutex
	up      bool          // Redis answered after the last failure
	changed chan struct{} // closed and replaced when up changes

	mu      sync.RWMutex
	subs    map[string]map[*redisSub]struct{} // by channel name
	waiters map[string][]chan struct{}        // pending SUBSCRIBE confirmations, FIFO
	count   int
	closed  bool
}

// NewRedis connects to the server at o.URL (or o.Target), checks it with a
// PING and starts the receiving goroutine. Close releases it.
func NewRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	client, owned, err := OpenClient(o.Client, o.URL, o.Target)
	if err != nil {
		return nil, err
	}
	if o.ChannelPrefix == "" {
		o.ChannelPrefix = "wsgate:room:"
	}
	if o.ConfirmTimeout <= 0 {
		o.ConfirmTimeout = 5 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// Deadlines of the callers' contexts (the probe's among them) bound
	// each command, not only go-redis's own read and write timeouts
	// (RedisTarget.Client sets ContextTimeoutEnabled).
	if err := client.Ping(ctx).Err(); err != nil {
		if owned {
			_ = client.Close()
		}
		return nil, fmt.Errorf("ping redis: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Redis{
		client:  client,
		owned:   owned,
		sharded: IsCluster(client),
		prefix:  o.ChannelPrefix,
		confirm: o.ConfirmTimeout,
		idle:    o.PingInterval,
		log:     o.Logger,
		ctx:     rctx,
		cancel:  cancel,
		shards:  make(map[int]*subscriber),
		up:      true,
		changed: make(chan struct{}),
		subs:    make(map[string]map[*redisSub]struct{}),
		waiters: make(map[string][]chan struct{}),
	}
	if !r.sharded {
		s := r.newSubscriber()
		r.shards[0] = s
		go s.receiveLoop()
	}
	return r, nil
}

// subscriber is one subscriber connection and its receiving goroutine.
type subscriber struct {
	r        *Redis
	ps       *redis.PubSub
	channels int // local channels on it (cluster only); guarded by r.cmdMu
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
}

func (r *Redis) newSubscriber() *subscriber {
	ctx, cancel := context.WithCancel(r.ctx)
	s := &subscriber{r: r, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if r.sharded {
		// No channel yet: go-redis picks the node by the first channel,
		// so the receiving goroutine starts after the first SSUBSCRIBE.
		s.ps = r.client.SSubscribe(ctx)
	} else {
		s.ps = r.client.Subscribe(ctx)
	}
	return s
}

// subscribe sends SUBSCRIBE, or SSUBSCRIBE on a cluster.
func (s *subscriber) subscribe(ctx context.Context, ch string) error {
	if s.r.sharded {
		return s.ps.SSubscribe(ctx, ch)
	}
	return s.ps.Subscribe(ctx, ch)
}

// unsubscribe sends UNSUBSCRIBE, or SUNSUBSCRIBE on a cluster.
func (s *subscriber) unsubscribe(ctx context.Context, ch string) error {
	if s.r.sharded {
		return s.ps.SUnsubscribe(ctx, ch)
	}
	return s.ps.Unsubscribe(ctx, ch)
}

// close stops the receiving goroutine and closes the connection.
func (s *subscriber) close() error {
	s.cancel()
	err := s.ps.Close()
	<-s.done
	return err
}

// Publish sends msg on the room's channel.
func (r *Redis) Publish(ctx context.Context, room string, msg []byte) error {
	if r.isClosed() {
		return ErrClosed
	}
	var err error
	if r.sharded {
		err = r.client.SPublish(ctx, ChannelName(r.prefix, room, true), msg).Err()
	} else {
		err = r.client.Publish(ctx, r.prefix+room, msg).Err()
	}
	if err != nil {
		return fmt.Errorf("publish on room %q: %w", room, err)
	}
	return nil
}

// Subscribe registers h on room. The first subscription of a room sends
// SUBSCRIBE and waits, bounded by ctx and ConfirmTimeout, for Redis to
// confirm it; see Bus.Subscribe for the meaning of a returned error.
func (r *Redis) Subscribe(ctx context.Context, room string, h Handler) (Subscription, error) {
	ch := ChannelName(r.prefix, room, r.sharded)
	s := &redisSub{r: r, ch: ch, room: room, h: h}

	r.cmdMu.Lock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.cmdMu.Unlock()
		return nil, ErrClosed
	}
	set := r.subs[ch]
	first := len(set) == 0
	if set == nil {
		set = make(map[*redisSub]struct{})
		r.subs[ch] = set
	}
	set[s] = struct{}{}
	r.count++
	var w chan struct{}
	if first {
		w = make(chan struct{})
		r.waiters[ch] = append(r.waiters[ch], w)
	}
	r.mu.Unlock()
	var werr error
	if first {
		sub, fresh := r.subscriberFor(ch)
		// go-redis records the channel even when the write fails and
		// subscribes it again on reconnect, so a failure here is not fatal.
		werr = sub.subscribe(ctx, ch)
		if fresh {
			go sub.receiveLoop()
		}
	}
	r.cmdMu.Unlock()
	if !first {
		return s, nil
	}

	t := time.NewTimer(r.confirm)
	defer t.Stop()
	select {
	case <-w:
		return s, nil
	case <-ctx.Done():
	case <-t.C:
	case <-r.ctx.Done():
	}
	r.dropWaiter(ch, w)
	if werr != nil {
		return s, fmt.Errorf("subscribe room %q: %w: %w", room, ErrUnconfirmed, werr)
	}
	return s, fmt.Errorf("subscribe room %q: %w", room, ErrUnconfirmed)
}

// subscriberFor returns the subscriber that carries ch, counting ch on it,
// and whether it was just made (its goroutine not started yet). The
// caller holds cmdMu.
func (r *Redis) subscriberFor(ch string) (*subscriber, bool) {
	k := 0
	if r.sharded {
		k = slot(ch)
	}
	s, ok := r.shards[k]
	if !ok {
		s = r.newSubscriber()
		r.shards[k] = s
	}
	s.channels++
	return s, !ok
}

// Subscriptions returns the number of live subscriptions.
func (r *Redis) Subscriptions() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.count
}

// Errors returns the number of transport errors met while receiving or
// unsubscribing.
func (r *Redis) Errors() uint64 { return r.errs.Load() }

// Resubscribes returns the number of channel subscriptions Redis confirmed
// again after a reconnect, each signalled to its handlers with a nil message.
func (r *Redis) Resubscribes() uint64 { return r.resubs.Load() }

// State reports whether Redis is reachable: false from a receive failure
// after which Redis did not answer a PING either (it is gone, not merely one
// connection), until the subscriber connection receives again. The channel
// is closed at the next change.
func (r *Redis) State() (up bool, changed <-chan struct{}) {
	r.stMu.Lock()
	defer r.stMu.Unlock()
	return r.up, r.changed
}

func (r *Redis) setUp(up bool) {
	r.stMu.Lock()
	defer r.stMu.Unlock()
	if r.up == up {
		return
	}
	r.up = up
	close(r.changed)
	r.changed = make(chan struct{})
	if up {
		r.log.Info("redis bus is up again")
	} else {
		r.log.Warn("redis bus is down: redis does not answer")
	}
}

// probeTimeout bounds the PING that tells a lost connection from a lost
// server.
const probeTimeout = 2 * time.Second

// reachable returns nil when Redis answers a PING on a pooled connection
// within probeTimeout, else the last error: on a cluster, when any master
// does, asked again every 100 ms until one answers (during a failover a
// master's answer can fail for a moment while go-redis replaces its slot
// map).
func (r *Redis) reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok {
		return r.client.Ping(ctx).Err()
	}
	for {
		var (
			mu      sync.Mutex
			lastErr error
			n       int
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			err := c.Ping(ctx).Err()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				n++
			} else {
				lastErr = err
			}
			return nil
		})
		if n > 0 {
			return nil
		}
		if lastErr == nil {
			lastErr = err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if lastErr == nil {
				lastErr = ctx.Err()
			}
			return lastErr
		}
	}
}

// Close stops receiving, drops every subscription and closes the connections.
func (r *Redis) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	clear(r.subs)
	r.count = 0
	r.mu.Unlock()
	r.cancel()
	r.cmdMu.Lock()
	var err error
	for k, s := range r.shards {
		if cerr := s.close(); err == nil {
			err = cerr
		}
		delete(r.shards, k)
	}
	r.cmdMu.Unlock()
	if r.owned {
		if cerr := r.client.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("close redis bus: %w", err)
	}
	return nil
}

func (r *Redis) isClosed() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.closed
}

func (r *Redis) dropWaiter(ch string, w chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiters[ch]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(r.waiters, ch)
	} else {
		r.waiters[ch] = ws
	}
}

func (r *Redis) unsubscribe(s *redisSub) {
	r.cmdMu.Lock()
	defer r.cmdMu.Unlock()
	r.mu.Lock()
	set := r.subs[s.ch]
	if _, ok := set[s]; !ok {
		r.mu.Unlock()
		return
	}
	delete(set, s)
	r.count--
	last := len(set) == 0
	if last {
		delete(r.subs, s.ch)
	}
	r.mu.Unlock()
	if !last {
		return
	}
	k := 0
	if r.sharded {
		k = slot(s.ch)
	}
	sub, ok := r.shards[k]
	if !ok {
		return // closed
	}
	if r.sharded {
		if sub.channels--; sub.channels == 0 {
			// The slot's last channel: its connection goes with it.
			delete(r.shards, k)
			_ = sub.close()
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.confirm)
	defer cancel()
	if err := sub.unsubscribe(ctx, s.ch); err != nil && r.ctx.Err() == nil {
		r.errs.Add(1)
		r.log.Warn("redis unsubscribe failed", "channel", s.ch, "err", err)
	}
}

const (
	// downPoll is how often a subscriber pings while the bus is down.
	downPoll = 250 * time.Millisecond
	// minBackoff is the subscriber's first wait after a receive failure.
	minBackoff = 50 * time.Millisecond
	// maxBackoff caps the wait between receive failures. A longer one
	// kept a relay down for up to that long after a Sentinel failover had
	// made Redis reachable again (issue 19 item 4).
	maxBackoff = downPoll
)

// nextBackoff is the wait after one more receive failure than the one
// that waited b: doubled, at most maxBackoff.
func nextBackoff(b time.Duration) time.Duration { return min(2*b, maxBackoff) }

// receiveLoop reads the subscriber connection until Close: it dispatches
// messages, resolves SUBSCRIBE confirmations, pings a silent connection and
// counts a ping left unanswered as a failure, and keeps State: down after a
// failure that a PING on another connection confirms, up again once the
// subscriber connection receives anything. After a failure it tries again
// within downPoll at the latest (and while down it pings every downPoll),
// so that comes soon after Redis is back: the relay refuses joins until
// then, and a relay.v1 client that resumes later than its room's history
// (-history messages) reaches back gets RESYNC instead of what it missed.
//
// On a cluster a failure also asks go-redis to reload the slot map, so the
// reconnect finds a replica that took over a lost master's slots.
func (s *subscriber) receiveLoop() {
	r := s.r
	defer close(s.done)
	backoff := minBackoff
	pinged := false // a PING is out and nothing was received since
	for s.ctx.Err() == nil {
		wait := r.idle
		if up, _ := r.State(); !up {
			wait = min(wait, downPoll)
		}
		v, err := s.ps.ReceiveTimeout(s.ctx, wait)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if pinged {
					// go-redis keeps a connection that only timed out:
					// the failure is counted here, and go-redis finds out
					// when TCP gives up on it.
					err = fmt.Errorf("no answer to a ping within %s: %w", wait, err)
				} else if perr := s.ps.Ping(s.ctx); perr == nil {
					// The answer is received like a message.
					pinged = true
					continue
				}
			}
			pinged = false
			n := r.errs.Add(1)
			if n&(n-1) == 0 { // log the 1st, 2nd, 4th, 8th... error only
				r.log.Warn("redis bus receive failed", "err", err, "errors", n)
			}
			if up, _ := r.State(); up {
				// A subscriber closed meanwhile (its slot's last room
				// left) cancels the probe: that says nothing of Redis.
				if perr := r.reachable(s.ctx); perr != nil && s.ctx.Err() == nil {
					r.log.Warn("redis does not answer a ping", "err", perr)
					r.setUp(false)
				}
			}
			if cc, ok := r.client.(*redis.ClusterClient); ok {
				cc.ReloadState(s.ctx)
				if redis.HasErrorPrefix(err, "MOVED") {
					// The node no longer serves the slot, and go-redis
					// keeps the connection: subscribe on a new one.
					go r.replaceShard(s, "")
				}
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return
			}
			backoff = nextBackoff(backoff)
			continue
		}
		backoff = minBackoff
		pinged = false
		r.setUp(true)
		switch m := v.(type) {
		case *redis.Message:
			r.dispatch(m.Channel, []byte(m.Payload))
		case *redis.Subscription:
			switch {
			case (m.Kind == "subscribe" || m.Kind == "ssubscribe") && !r.confirmed(m.Channel):
				// Nobody waits for it: go-redis re-subscribed the channel
				// on a new connection, and what was published on the old
				// one since it failed is lost.
				r.resubscribed(m.Channel)
			case m.Kind == "sunsubscribe" && r.wanted(m.Channel):
				// Not asked for: Redis drops the sharded subscriptions of
				// a slot its node stopped serving (a failed master that
				// came back as a replica, a migrated slot).
				go r.replaceShard(s, m.Channel)
			}
		}
	}
}

func (r *Redis) dispatch(ch string, msg []byte) {
	room, ok := roomOf(r.prefix, ch, r.sharded)
	if !ok {
		return
	}
	if msg == nil {
		msg = []byte{} // nil is the gap marker
	}
	r.deliver(ch, room, msg)
}

// resubscribed tells ch's handlers, with a nil message, that they may have
// missed messages.
func (r *Redis) resubscribed(ch string) {
	room, ok := roomOf(r.prefix, ch, r.sharded)
	if !ok {
		return
	}
	r.mu.RLock()
	n := len(r.subs[ch])
	r.mu.RUnlock()
	if n == 0 {
		return
	}
	r.resubs.Add(1)
	r.log.Info("redis bus re-subscribed a channel", "channel", ch)
	r.deliver(ch, room, nil)
}

// wanted reports whether ch has local subscribers.
func (r *Redis) wanted(ch string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.subs[ch]) > 0
}

// replaceShard moves the channels of old, a cluster subscriber whose node
// dropped them (ch, one of them) or answered MOVED, to a new subscriber
// connection, made after the slot map is reloaded so that it reaches the
// slot's current master. Each channel's confirmation then counts as a
// resubscribe, so its rooms repair the gap from their logs. Nothing happens
// if old was replaced or closed meanwhile.
func (r *Redis) replaceShard(old *subscriber, ch string) {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	// go-redis reloads lazily: wait for the reload (bounded) before
	// choosing the node.
	ctx, cancel := context.WithTimeout(old.ctx, r.confirm)
	defer cancel()
	cc.ReloadState(ctx)
	t := time.NewTimer(300 * time.Millisecond)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return
	}
	r.cmdMu.Lock()
	k := -1
	for key, s := range r.shards {
		if s == old {
			k = key
		}
	}
	if k < 0 {
		r.cmdMu.Unlock()
		return
	}
	r.mu.RLock()
	var chans []string
	for c := range r.subs {
		if slot(c) == k {
			chans = append(chans, c)
		}
	}
	r.mu.RUnlock()
	if len(chans) == 0 {
		r.cmdMu.Unlock()
		return
	}
	ns := r.newSubscriber()
	ns.channels = old.channels
	r.shards[k] = ns
	err := ns.ps.SSubscribe(ctx, chans...)
	go ns.receiveLoop()
	r.cmdMu.Unlock()
	_ = old.close()
	r.log.Warn("redis dropped a slot's subscriptions, subscribed them on a new connection",
		"slot", k, "channel", ch, "channels", len(chans), "err", err)
}

func (r *Redis) deliver(ch, room string, msg []byte) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for s := range r.subs[ch] {
		s.h(room, msg)
	}
}

// confirmed resolves the oldest pending Subscribe of ch and reports whether
// there was one.
func (r *Redis) confirmed(ch string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiters[ch]
	if len(ws) == 0 {
		return false
	}
	close(ws[0])
	if len(ws) == 1 {
		delete(r.waiters, ch)
	} else {
		r.waiters[ch] = ws[1:]
	}
	return true
}

type redisSub struct {
	r    *Redis
	ch   string
	room string
	h    Handler
}

func (s *redisSub) Close() error {
	s.r.unsubscribe(s)
	return nil
}

var (
	_ Bus                = (*Redis)(nil)
	_ ErrorCounter       = (*Redis)(nil)
	_ ResubscribeCounter = (*Redis)(nil)
	_ Subscription       = (*redisSub)(nil)
)
