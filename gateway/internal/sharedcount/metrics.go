package sharedcount

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics counts the sharers' exchanges; it is their observer.
type metrics struct {
	exchanges *prometheus.CounterVec
	peers     *prometheus.GaugeVec
	fallback  *prometheus.GaugeVec
	fallbacks *prometheus.CounterVec
}

// newMetrics returns the sharers' metrics, registered with reg unless it
// is nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
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
	if reg != nil {
		reg.MustRegister(m.exchanges, m.peers, m.fallback, m.fallbacks)
	}
	return m
}

// Exchanged counts one exchange.
func (m *metrics) Exchanged(pool string, ok bool, peers int) {
	if !ok {
		m.exchanges.WithLabelValues(pool, "error").Inc()
		return
	}
	m.exchanges.WithLabelValues(pool, "ok").Inc()
	m.peers.WithLabelValues(pool).Set(float64(peers))
}

// Fallback sets the pool's fallback gauge.
func (m *metrics) Fallback(pool string, on bool) {
	v := 0.0
	if on {
		v = 1
		m.fallbacks.WithLabelValues(pool).Inc()
		m.peers.WithLabelValues(pool).Set(0)
	}
	m.fallback.WithLabelValues(pool).Set(v)
}

// forget drops a pool's gauges once it no longer shares.
func (m *metrics) forget(pool string) {
	m.peers.DeleteLabelValues(pool)
	m.fallback.DeleteLabelValues(pool)
}

// forgetCounters drops a pool's counters once the pool has left the
// config, so pools that come and go leave no series behind.
func (m *metrics) forgetCounters(pool string) {
	m.exchanges.DeletePartialMatch(prometheus.Labels{"pool": pool})
	m.fallbacks.DeleteLabelValues(pool)
}

// observer is one sharer's observer, passing its reports on to metrics
// until it is ended. A sharer told to stop may still finish an exchange
// in flight; ended, its observer drops that report, so the pool's gauges
// deleted when it stops sharing are not created again. Its lock is held
// only over gauge updates, never across I/O.
type observer struct {
	m     *metrics
	mu    sync.Mutex
	ended bool
}

func (o *observer) Exchanged(pool string, ok bool, peers int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.m.Exchanged(pool, ok, peers)
	}
}

func (o *observer) Fallback(pool string, on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.m.Fallback(pool, on)
	}
}

// end drops every later report; with forget, it also deletes the pool's
// gauges (the pool no longer shares).
func (o *observer) end(pool string, forget bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	if forget {
		o.m.forget(pool)
	}
}

var (
	_ Observer = (*metrics)(nil)
	_ Observer = (*observer)(nil)
)
