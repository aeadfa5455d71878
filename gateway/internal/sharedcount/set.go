package sharedcount

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/redact"
)

// SetConfig is what a [Set] needs. It is read once by [NewSet].
type SetConfig struct {
	// Nodes returns the nodes of the pool named pool in the config in
	// force (none if it has gone); it is called once per exchange and
	// must not block.
	Nodes func(pool string) []*balancer.Node
	// Log receives a line when a pool's sharer starts or stops, and the
	// sharers' own lines.
	Log *slog.Logger
	// Registerer, if set, registers the sharers' metrics
	// (wsgate_shared_counts_*) once Sync is first called.
	Registerer prometheus.Registerer
}

// Set runs a [Sharer] for every pool with [pools.shared_counts], by pool
// name, across reloads. Starting and stopping a sharer does no Redis I/O
// in the caller (the sharer's goroutine does it), so the Set's lock, like
// the gateway's reload lock around [Set.Sync], is never held across Redis
// I/O. It is safe for concurrent use.
type Set struct {
	cfg     SetConfig
	mu      sync.Mutex
	running map[string]*sharing
	metrics *metrics
}

// sharing is one pool's running sharer and what it was started with.
type sharing struct {
	conf conf.SharedCounts
	id   string
	s    *Sharer
	obs  *observer
}

// NewSet returns a Set that runs no sharer yet: see [Set.Sync].
func NewSet(cfg SetConfig) *Set {
	return &Set{cfg: cfg}
}

// StopWait bounds how long [StopAll] waits for the sharers to delete
// their keys: each takes at most two exchange timeouts.
const StopWait = 3 * MaxTimeout

// gatewayID is gateway.id, or "HOST:PID" when it is not set.
func gatewayID(cfg *conf.Config) string {
	if cfg.Gateway.ID != "" {
		return cfg.Gateway.ID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// Sync starts, restarts and stops the sharers so that the pools of cfg,
// the config in force, with [pools.shared_counts] share, as configured,
// and no other pool does. A sharer whose settings are unchanged keeps
// running.
func (set *Set) Sync(cfg *conf.Config) {
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.metrics == nil {
		set.metrics = newMetrics(set.cfg.Registerer)
	}
	if set.running == nil {
		set.running = map[string]*sharing{}
	}
	pools := make(map[string]conf.SharedCounts, len(cfg.Pools))
	for _, p := range cfg.Pools {
		pools[p.Name] = p.SharedCounts
	}
	log := set.cfg.Log
	id := gatewayID(cfg)
	for name, run := range set.running {
		if c, ok := pools[name]; !ok || c.Redis == "" {
			run.s.Stop(true)
			run.obs.end(name, true)
			if !ok { // the pool left the config: its counters go too
				set.metrics.forgetCounters(name)
			}
			delete(set.running, name)
			log.Info("shared counts stopped", "pool", name)
		}
	}
	for name, c := range pools {
		if c.Redis == "" {
			continue
		}
		old := set.running[name]
		if old != nil && old.conf == c && old.id == id {
			continue
		}
		var prev *Sharer
		if old != nil {
			// Under another key the old one's counts would stay until
			// they expire: delete them. Under the same key the new
			// sharer overwrites them.
			old.s.Stop(old.conf.Redis != c.Redis || old.conf.KeyPrefix != c.KeyPrefix || old.id != id)
			old.obs.end(name, false) // the new sharer reports under the same labels
			prev = old.s
		}
		obs := &observer{m: set.metrics}
		sh, err := Start(Config{
			URL:       c.Redis,
			Pool:      name,
			ID:        id,
			KeyPrefix: c.KeyPrefix,
			Interval:  c.Interval.Duration,
			Nodes:     set.poolNodes(name),
			Log:       log,
			Observer:  obs,
		}, prev)
		if err != nil { // the URL was validated: not expected
			obs.end(name, true) // no sharer reports for the pool: drop what the old one set
			delete(set.running, name)
			log.Error("shared counts not started; the pool balances by its own counts", "pool", name, "err", err)
			continue
		}
		set.running[name] = &sharing{conf: c, id: id, s: sh, obs: obs}
		log.Info("shared counts started", "pool", name, "redis", redact.URL(c.Redis), "id", id, "interval", c.Interval.Duration)
	}
}

// poolNodes returns the nodes of the pool named name in the config in
// force (none if it has gone).
func (set *Set) poolNodes(name string) func() []*balancer.Node {
	return func() []*balancer.Node { return set.cfg.Nodes(name) }
}

// TakeAll removes every sharer from the Set and returns them; the Set
// starts none after it unless Sync is called again.
func (set *Set) TakeAll() []*Sharer {
	set.mu.Lock()
	defer set.mu.Unlock()
	out := make([]*Sharer, 0, len(set.running))
	for _, run := range set.running {
		out = append(out, run.s)
	}
	set.running = nil
	return out
}

// StopAll stops every sharer, deleting its key so the other gateways
// stop counting this one's tunnels, and waits for them for at most
// [StopWait].
func StopAll(sharers []*Sharer) {
	for _, sh := range sharers {
		sh.Stop(true)
	}
	deadline := time.NewTimer(StopWait)
	defer deadline.Stop()
	for _, sh := range sharers {
		select {
		case <-sh.Done():
		case <-deadline.C:
			return
		}
	}
}
