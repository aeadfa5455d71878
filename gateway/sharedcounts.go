package gateway

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/gateway/internal/sharedcount"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
)

// sharedCounts runs a sharer for every pool with [pools.shared_counts],
// by pool name, across reloads. Starting and stopping a sharer does no
// Redis I/O in the caller (the sharer's goroutine does it), so mu, like
// reload.mu around it, is never held across Redis I/O. It is safe for
// concurrent use.
type sharedCounts struct {
	mu      sync.Mutex
	running map[string]*sharedRun
	metrics *sharedMetrics
}

// sharedRun is one pool's running sharer and what it was started with.
type sharedRun struct {
	conf conf.SharedCounts
	id   string
	s    *sharedcount.Sharer
	obs  *sharerObserver
}

// sharedStopWait bounds how long Shutdown waits for the sharers to delete
// their keys: each takes at most two exchange timeouts.
const sharedStopWait = 3 * sharedcount.MaxTimeout

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

// syncSharedCounts starts, restarts and stops the sharers so that the
// pools of g with [pools.shared_counts] share, as configured, and no
// other pool does. A sharer whose settings are unchanged keeps running.
func (s *Server) syncSharedCounts(g *generation) {
	sc := &s.shared
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.metrics == nil {
		sc.metrics = newSharedMetrics(s.metrics)
	}
	if sc.running == nil {
		sc.running = map[string]*sharedRun{}
	}
	id := gatewayID(g.cfg)
	for name, run := range sc.running {
		if p := g.pools[name]; p == nil || p.Conf.SharedCounts.Redis == "" {
			run.s.Stop(true)
			run.obs.end(name, true)
			if p == nil { // the pool left the config: its counters go too
				sc.metrics.forgetCounters(name)
			}
			delete(sc.running, name)
			s.log.Info("shared counts stopped", "pool", name)
		}
	}
	for name, p := range g.pools {
		c := p.Conf.SharedCounts
		if c.Redis == "" {
			continue
		}
		old := sc.running[name]
		if old != nil && old.conf == c && old.id == id {
			continue
		}
		var prev *sharedcount.Sharer
		if old != nil {
			// Under another key the old one's counts would stay until
			// they expire: delete them. Under the same key the new
			// sharer overwrites them.
			old.s.Stop(old.conf.Redis != c.Redis || old.conf.KeyPrefix != c.KeyPrefix || old.id != id)
			old.obs.end(name, false) // the new sharer reports under the same labels
			prev = old.s
		}
		obs := &sharerObserver{sm: sc.metrics}
		sh, err := sharedcount.Start(sharedcount.Config{
			URL:       c.Redis,
			Pool:      name,
			ID:        id,
			KeyPrefix: c.KeyPrefix,
			Interval:  c.Interval.Duration,
			Nodes:     s.poolNodes(name),
			Log:       s.log,
			Observer:  obs,
		}, prev)
		if err != nil { // the URL was validated: not expected
			obs.end(name, true) // no sharer reports for the pool: drop what the old one set
			delete(sc.running, name)
			s.log.Error("shared counts not started; the pool balances by its own counts", "pool", name, "err", err)
			continue
		}
		sc.running[name] = &sharedRun{conf: c, id: id, s: sh, obs: obs}
		s.log.Info("shared counts started", "pool", name, "redis", admin.RedactURL(c.Redis), "id", id, "interval", c.Interval.Duration)
	}
}

// poolNodes returns the nodes of the pool named name in the generation in
// force (none if it has gone).
func (s *Server) poolNodes(name string) func() []*balancer.Node {
	return func() []*balancer.Node {
		if p := s.current().pools[name]; p != nil {
			return p.Balancer.Nodes()
		}
		return nil
	}
}

// takeAll removes every sharer from sc and returns them; sc starts none
// after it unless syncSharedCounts is called again.
func (sc *sharedCounts) takeAll() []*sharedcount.Sharer {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	out := make([]*sharedcount.Sharer, 0, len(sc.running))
	for _, run := range sc.running {
		out = append(out, run.s)
	}
	sc.running = nil
	return out
}

// stopSharers stops every sharer, deleting its key so the other gateways
// stop counting this one's tunnels, and waits for them for at most
// sharedStopWait.
func stopSharers(sharers []*sharedcount.Sharer) {
	for _, sh := range sharers {
		sh.Stop(true)
	}
	deadline := time.NewTimer(sharedStopWait)
	defer deadline.Stop()
	for _, sh := range sharers {
		select {
		case <-sh.Done():
		case <-deadline.C:
			return
		}
	}
}

// sharedMetrics counts the sharers' exchanges; it is their observer.
type sharedMetrics struct {
	exchanges *prometheus.CounterVec
	peers     *prometheus.GaugeVec
	fallback  *prometheus.GaugeVec
	fallbacks *prometheus.CounterVec
}

func newSharedMetrics(m *telemetry.Metrics) *sharedMetrics {
	sm := &sharedMetrics{
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_shared_counts_exchanges_total",
			Help: "Exchanges of live counts with the other gateways through Redis ([pools.shared_counts]), one Redis command each, by pool and result (ok, error).",
		}, []string{"pool", "result"}),
		peers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wsgate_shared_counts_peers",
			Help: "Other gateways whose live counts the pool's last exchange received.",
		}, []string{"pool"}),
		fallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wsgate_shared_counts_fallback",
			Help: "1 while the pool balances by this gateway's counts only because exchanges with Redis failed for 4 intervals, else 0.",
		}, []string{"pool"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_shared_counts_fallbacks_total",
			Help: "Times the pool fell back to this gateway's counts only because exchanges with Redis failed.",
		}, []string{"pool"}),
	}
	if m != nil {
		m.Reg.MustRegister(sm.exchanges, sm.peers, sm.fallback, sm.fallbacks)
	}
	return sm
}

// Exchanged counts one exchange.
func (sm *sharedMetrics) Exchanged(pool string, ok bool, peers int) {
	if !ok {
		sm.exchanges.WithLabelValues(pool, "error").Inc()
		return
	}
	sm.exchanges.WithLabelValues(pool, "ok").Inc()
	sm.peers.WithLabelValues(pool).Set(float64(peers))
}

// Fallback sets the pool's fallback gauge.
func (sm *sharedMetrics) Fallback(pool string, on bool) {
	v := 0.0
	if on {
		v = 1
		sm.fallbacks.WithLabelValues(pool).Inc()
		sm.peers.WithLabelValues(pool).Set(0)
	}
	sm.fallback.WithLabelValues(pool).Set(v)
}

// forget drops a pool's gauges once it no longer shares.
func (sm *sharedMetrics) forget(pool string) {
	sm.peers.DeleteLabelValues(pool)
	sm.fallback.DeleteLabelValues(pool)
}

// forgetCounters drops a pool's counters once the pool has left the
// config, so pools that come and go leave no series behind.
func (sm *sharedMetrics) forgetCounters(pool string) {
	sm.exchanges.DeletePartialMatch(prometheus.Labels{"pool": pool})
	sm.fallbacks.DeleteLabelValues(pool)
}

// sharerObserver is one sharer's observer, passing its reports on to
// sharedMetrics until it is ended. A sharer told to stop may still finish
// an exchange in flight; ended, its observer drops that report, so the
// pool's gauges deleted when it stops sharing are not created again. Its
// lock is held only over gauge updates, never across I/O.
type sharerObserver struct {
	sm    *sharedMetrics
	mu    sync.Mutex
	ended bool
}

func (o *sharerObserver) Exchanged(pool string, ok bool, peers int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.sm.Exchanged(pool, ok, peers)
	}
}

func (o *sharerObserver) Fallback(pool string, on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.sm.Fallback(pool, on)
	}
}

// end drops every later report; with forget, it also deletes the pool's
// gauges (the pool no longer shares).
func (o *sharerObserver) end(pool string, forget bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	if forget {
		o.sm.forget(pool)
	}
}

var (
	_ sharedcount.Observer = (*sharedMetrics)(nil)
	_ sharedcount.Observer = (*sharerObserver)(nil)
)
