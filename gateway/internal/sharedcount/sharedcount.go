// Package sharedcount shares a pool's live connection counts between
// gateways in front of the same nodes, through Redis. Each [Sharer] runs
// one exchange per interval: a Lua script that stores this gateway's count
// per node under its own expiring key and returns the other gateways'
// keys. The counts received are summed per node address and handed to the
// balancer with [balancer.Node.SetOthers]; a handshake reads them from the
// node's atomic and never waits on Redis. A [Set] runs one Sharer per pool
// that shares, across the gateway's reloads, and counts the exchanges in
// its metrics.
package sharedcount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/balancer"
)

// TTLIntervals is how many intervals a gateway's counts live in Redis
// without a new exchange, and how long a gateway keeps the counts it last
// received when exchanges fail before it falls back to its own.
const TTLIntervals = 4

// MaxTimeout bounds one exchange with Redis, whatever the interval.
const MaxTimeout = time.Second

// Observer is told how the exchanges go; the gateway counts them in its
// metrics. Its methods are called from the sharer's goroutine, one at a
// time.
type Observer interface {
	// Exchanged reports one exchange: ok, and the other gateways whose
	// counts it received.
	Exchanged(pool string, ok bool, peers int)
	// Fallback reports that the pool balances by its own counts only
	// (on), or by the shared ones again (off).
	Fallback(pool string, on bool)
}

// Config is what a [Sharer] needs. It is read once by [Start].
type Config struct {
	// URL is the Redis URL (redis:// or rediss://).
	URL string
	// Pool is the pool's name; it is the keys' hash tag.
	Pool string
	// ID names this gateway among those sharing the pool.
	ID string
	// KeyPrefix starts every key.
	KeyPrefix string
	// Interval is the time between two exchanges (> 0).
	Interval time.Duration
	// Nodes returns the pool's nodes in force; it is called once per
	// exchange and must not block.
	Nodes func() []*balancer.Node
	// Log receives one line when the pool falls back to its own counts
	// and one when sharing is back.
	Log *slog.Logger
	// Observer, if set, is told every exchange's outcome.
	Observer Observer
}

// Sharer runs a pool's exchanges in a goroutine of its own from [Start]
// until [Sharer.Stop]. Its methods are safe for concurrent use.
type Sharer struct {
	cfg     Config
	client  *redis.Client
	setKey  string // the pool's set of gateway ids
	ownKey  string // this gateway's counts
	timeout time.Duration
	stop    chan struct{}
	done    chan struct{}
	after   <-chan struct{} // the predecessor's done; nil without one
	once    sync.Once

	// Owned by the goroutine.
	lastOK   time.Time
	fallback bool
	forget   bool             // set before stop closes: delete the own key on the way out
	set      []*balancer.Node // the nodes whose others the last exchange set
}

// errNoNodes is returned by Start for a config without Nodes.
var errNoNodes = errors.New("sharedcount: Config.Nodes is nil")

// Start parses cfg.URL and starts the exchanges; it does not wait for
// Redis, which may be down (the pool then balances by its own counts). With
// prev (the sharer it replaces, already stopped), the first exchange waits
// until prev has finished, so prev's last write to the nodes comes first.
func Start(cfg Config, prev *Sharer) (*Sharer, error) {
	if cfg.Nodes == nil {
		return nil, errNoNodes
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("sharedcount: interval %s is not > 0", cfg.Interval)
	}
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("sharedcount: %w", err)
	}
	timeout := min(cfg.Interval, MaxTimeout)
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1 // a failed exchange is retried by the next one
	opts.PoolSize = 2
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Sharer{
		cfg:     cfg,
		client:  redis.NewClient(opts),
		setKey:  cfg.KeyPrefix + ":{" + cfg.Pool + "}",
		timeout: timeout,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.ownKey = s.setKey + ":" + cfg.ID
	if prev != nil {
		s.after = prev.done
	}
	go s.run()
	return s, nil
}

// Stop ends the exchanges without waiting (see [Sharer.Done]); the
// goroutine then sets every node's others to 0. With forget it also deletes
// this gateway's key, so the other gateways stop counting its tunnels at
// their next exchange rather than after the key expires: for a shutdown,
// or a pool that no longer shares under this key. A second call does
// nothing.
func (s *Sharer) Stop(forget bool) {
	s.once.Do(func() {
		s.forget = forget // read by the goroutine once stop is closed
		close(s.stop)
	})
}

// Done is closed once the goroutine has finished, at most about two
// exchange timeouts after Stop.
func (s *Sharer) Done() <-chan struct{} { return s.done }

// run is the sharer's goroutine.
func (s *Sharer) run() {
	defer close(s.done)
	defer s.client.Close()
	if s.after != nil {
		select {
		case <-s.after:
		case <-s.stop:
			s.leave()
			return
		}
	}
	s.lastOK = time.Now()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.exchange()
		select {
		case <-s.stop:
			s.leave()
			return
		case <-t.C:
		}
	}
}

// leave undoes what the sharer set: the nodes' others, and with forget
// its key.
func (s *Sharer) leave() {
	for _, n := range s.cfg.Nodes() {
		n.SetOthers(0)
	}
	// And the nodes it last set that the pool no longer lists (a reload
	// removed them, or the whole pool): they may come back in a pool that
	// does not share.
	for _, n := range s.set {
		n.SetOthers(0)
	}
	s.set = nil
	if !s.forget {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.ownKey)
		p.SRem(ctx, s.setKey, s.cfg.ID)
		return nil
	})
}

// exchangeScript stores this gateway's counts and returns the others'.
// KEYS[1] is the pool's set of gateway ids, KEYS[2] this gateway's key;
// ARGV[1] its id, ARGV[2] its counts, ARGV[3] the ttl in milliseconds,
// ARGV[4] the start of every gateway's key (KEYS[1] .. ":"), ARGV[5]
// MaxPeers. A member whose key has expired leaves the set. It returns id,
// counts, id, counts... for at most MaxPeers other gateways.
var exchangeScript = redis.NewScript(`
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local out = {}
local room = 2 * tonumber(ARGV[5])
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if id ~= ARGV[1] then
    local v = redis.call('GET', ARGV[4] .. id)
    if v then
      if #out < room then
        out[#out+1] = id
        out[#out+1] = v
      end
    else
      redis.call('SREM', KEYS[1], id)
    end
  end
end
return out
`)

// exchange runs one exchange and applies its outcome to the nodes.
func (s *Sharer) exchange() {
	nodes := s.cfg.Nodes()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	ttl := strconv.FormatInt((TTLIntervals * s.cfg.Interval).Milliseconds(), 10)
	res, err := exchangeScript.Run(ctx, s.client, []string{s.setKey, s.ownKey},
		s.cfg.ID, Encode(nodes), ttl, s.setKey+":", MaxPeers).StringSlice()
	if err != nil {
		s.failed(nodes, err)
		return
	}
	others := make(map[string]int, len(nodes))
	peer := map[string]int{}
	peers := 0
	for i := 0; i+1 < len(res) && peers < MaxPeers; i += 2 {
		peers++
		clear(peer)
		Decode(res[i+1], peer)
		for _, n := range nodes {
			others[n.Addr()] = min(others[n.Addr()]+peerCount(peer[n.Addr()], n), maxCount)
		}
	}
	s.forgetGone(nodes)
	for _, n := range nodes {
		n.SetOthers(others[n.Addr()])
	}
	s.set = append(s.set[:0], nodes...)
	s.lastOK = time.Now()
	if s.fallback {
		s.fallback = false
		s.cfg.Log.Info("shared counts back: least connections counts the other gateways' tunnels again", "pool", s.cfg.Pool, "peers", peers)
		s.observeFallback(false)
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Exchanged(s.cfg.Pool, true, peers)
	}
}

// forgetGone clears the others of the nodes the last exchange set that
// nodes (the pool's now) no longer holds: a reload removed them.
func (s *Sharer) forgetGone(nodes []*balancer.Node) {
	if len(s.set) == 0 {
		return
	}
	now := make(map[*balancer.Node]bool, len(nodes))
	for _, n := range nodes {
		now[n] = true
	}
	for _, n := range s.set {
		if !now[n] {
			n.SetOthers(0)
		}
	}
}

// failed notes an exchange that failed: the counts last received stay for
// TTLIntervals intervals after the last exchange that worked (as they
// would in Redis), then the pool falls back to its own counts.
func (s *Sharer) failed(nodes []*balancer.Node, err error) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Exchanged(s.cfg.Pool, false, 0)
	}
	if time.Since(s.lastOK) < TTLIntervals*s.cfg.Interval {
		return
	}
	s.forgetGone(nodes)
	s.set = s.set[:0]
	for _, n := range nodes { // again each time: a reload may add nodes
		n.SetOthers(0)
	}
	if !s.fallback {
		s.fallback = true
		s.cfg.Log.Warn("shared counts unavailable: least connections counts this gateway's tunnels only until Redis answers",
			"pool", s.cfg.Pool, "err", err, "since", s.lastOK)
		s.observeFallback(true)
	}
}

func (s *Sharer) observeFallback(on bool) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Fallback(s.cfg.Pool, on)
	}
}

// MaxPeers bounds the other gateways whose counts one exchange reads;
// the others beyond it are not counted.
const MaxPeers = 256

// peerCount is one other gateway's count c on n, held to n's cap: a
// gateway in front of the same nodes holds at most that many, so a peer
// that writes more (a bug, or anyone with access to Redis) cannot make
// the node look busier than one full gateway and steer every client
// away from it.
func peerCount(c int, n *balancer.Node) int {
	if m := n.MaxConns(); m > 0 {
		return min(c, m)
	}
	return c
}

// Encode writes the live count of every node, one "ADDR COUNT" line each.
func Encode(nodes []*balancer.Node) string {
	var b strings.Builder
	for _, n := range nodes {
		b.WriteString(n.Addr())
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(n.Live()))
		b.WriteByte('\n')
	}
	return b.String()
}

// maxCount bounds one node's count, read or summed: far above what any
// node holds, and far below where a sum over gateways could overflow.
const maxCount = 1 << 40

// Decode adds the counts of one gateway's value, as Encode wrote it, to
// into by address, each sum held to 2^40. Lines it cannot read, and counts
// below 0 or above 2^40, are skipped.
func Decode(v string, into map[string]int) {
	for line := range strings.Lines(v) {
		addr, c, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if !ok {
			continue
		}
		if k, err := strconv.Atoi(c); err == nil && k >= 0 && k <= maxCount {
			into[addr] = min(into[addr]+k, maxCount)
		}
	}
}
