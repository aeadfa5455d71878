package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/buildinfo"
)

// Metrics is the gateway's Prometheus registry. Counters that move once per
// handshake, close or probe are ordinary counters. Frames and bytes are not
// counted on a shared cache line per frame: each tunnel counts its own in
// atomics of its direction, added once per read, and a scrape sums the live
// tunnels and the registry's retired totals without waiting on any tunnel.
// It is safe for concurrent use; the exported fields are set once by
// NewMetrics and are the collectors the gateway's parts count on.
type Metrics struct {
	// Reg is the registry /metrics serves; other parts of the gateway
	// (discovery, shared counts) register their own collectors on it.
	Reg *prometheus.Registry

	// Counted by Metrics' own methods and observers:
	handshakes       *prometheus.CounterVec
	handshakeSeconds *prometheus.HistogramVec
	closes           *prometheus.CounterVec
	tunnelEnds       *prometheus.CounterVec
	probes           *prometheus.CounterVec
	probeSeconds     *prometheus.HistogramVec
	transitions      *prometheus.CounterVec
	pluginCalls      *prometheus.CounterVec

	// Drains is wsgate_drains_total, by scope.
	Drains *prometheus.CounterVec
	// Reloads is wsgate_reloads_total, by result.
	Reloads *prometheus.CounterVec
	// Generation is wsgate_config_generation.
	Generation prometheus.Gauge
	// PluginSeconds is wsgate_plugin_call_duration_seconds, by plugin.
	PluginSeconds *prometheus.HistogramVec
	// Revocations is wsgate_revoked_tunnels_total.
	Revocations prometheus.Counter
	// Expiries is wsgate_expired_tunnels_total.
	Expiries prometheus.Counter
	// AcceptErrors is wsgate_accept_errors_total, by errno.
	AcceptErrors *prometheus.CounterVec
	// Refused is wsgate_connections_refused_total, by limit.
	Refused *prometheus.CounterVec
	// LocalDialErrors is wsgate_upstream_local_dial_errors_total, by pool,
	// node and reason.
	LocalDialErrors *prometheus.CounterVec
	// ProxyErrors is wsgate_proxy_errors_total, by pool.
	ProxyErrors *prometheus.CounterVec
	// TLSReloads is wsgate_tls_reloads_total, by result.
	TLSReloads *prometheus.CounterVec
	// TLSRecords is wsgate_tls_records_total, by layer and reason.
	TLSRecords *prometheus.CounterVec
	// TunnelStarts is wsgate_tunnels_started_total, by engine.
	TunnelStarts *prometheus.CounterVec
	// RebalanceMoves is wsgate_rebalance_moves_total, by pool and node:
	// the rebalancer's, made here so ForgetNode reaches it.
	RebalanceMoves *prometheus.CounterVec
	// StartedOn are TunnelStarts' counters, looked up once: a
	// handshake counts its tunnel without hashing a label.
	StartedOn map[string]prometheus.Counter
}

// Live is what the metrics read from the running gateway at scrape time.
// Its methods are called concurrently with the gateway's work and must not
// wait on any tunnel.
type Live interface {
	// LiveTunnels is the number of tunnels running.
	LiveTunnels() int
	// TunnelTotals are the frames and bytes forwarded so far by every
	// tunnel, live or ended.
	TunnelTotals() tunnel.Stats
	// EachNode calls fn with each node of each pool in force, pools in
	// the order of their names.
	EachNode(fn func(pool string, n *balancer.Node))
	// EachH2 calls fn with the HTTP/2 connections to each node of each
	// pool with protocol = "h2": those that take streams (open) and
	// those that wait for their streams to end (closing).
	EachH2(fn func(pool, node string, open, closing int))
	// OpenConns is the number of open client connections, counted from
	// accept: handshakes in flight, HTTP keep-alive connections and tunnels.
	OpenConns() int64
	// ConnLimit is max_conns in force: the configured value, held to what
	// the open-file limit carries.
	ConnLimit() int64
}

// NewMetrics makes the gateway's metrics and registers them, with the
// collectors that read live at scrape time from live, the Go runtime's
// and the process's.
func NewMetrics(live Live) *Metrics {
	m := &Metrics{
		Reg: prometheus.NewRegistry(),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_handshakes_total",
			Help: "WebSocket handshakes by result: ok, bad_request, origin, auth_denied, auth_unavailable, no_capacity, upstream_error, upstream_refused, local_dial_error, client_gone, no_route, ip_rate (handshake_rate_per_ip, 429), ip_conns and max_conns (an HTTP/2 stream beside its connection's first, over max_conns_per_ip, 429, or max_conns, 503), admission (a pool's admission rate, 503 or 1013).",
		}, []string{"result"}),
		handshakeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wsgate_handshake_duration_seconds",
			Help:    "Time from the client's upgrade request to the gateway's answer, by result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"result"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_closes_total",
			Help: "Close frames seen at the end of tunnels, by code and by side: client and node sent it, gateway_to_client and gateway_to_node were the gateway's own.",
		}, []string{"code", "side"}),
		tunnelEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_tunnels_closed_total",
			Help: "Tunnels ended, by the first cause seen: closed (close handshake finished), client_gone and node_gone (that side's connection ended without a close frame), write_timeout (the client or node accepted no byte for gateway.write_timeout), close_timeout (the close handshake did not finish in time), aborted (cut at the end of a drain), pong_timeout (after a keepalive ping reached the client, it sent nothing for the route's pong_timeout; or the ping waited longer than write_timeout + pong_timeout).",
		}, []string{"reason"}),
		Drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_drains_total",
			Help: "Drains started, by scope: gateway (shutdown), node (admin drain), node_migrate (admin drain that also closes the node's tunnels).",
		}, []string{"scope"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_health_checks_total",
			Help: "Active health probes by pool, node and result (pass, fail).",
		}, []string{"pool", "node", "result"}),
		probeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wsgate_health_check_duration_seconds",
			Help:    "Latency of active health probes, by pool.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"pool"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_node_transitions_total",
			Help: "Node state changes by pool, node and the state entered.",
		}, []string{"pool", "node", "state"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_reloads_total",
			Help: "Config reloads by result (ok, error); an error keeps the running config.",
		}, []string{"result"}),
		Generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wsgate_config_generation",
			Help: "Generation of the config in force: 1 at start, +1 per successful reload.",
		}),
	}
	m.pluginCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_plugin_calls_total",
		Help: "Auth plugin decisions by plugin, outcome (allow, deny, error, unavailable) and whether the decision cache answered.",
	}, []string{"plugin", "outcome", "cached"})
	m.PluginSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wsgate_plugin_call_duration_seconds",
		Help:    "Latency of auth plugin calls that reached the plugin, by plugin.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"plugin"})
	m.Revocations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsgate_revoked_tunnels_total",
		Help: "Tunnels closed with 1008 because their credential's subject was revoked.",
	})
	m.Expiries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsgate_expired_tunnels_total",
		Help: "Tunnels closed with 1008 because their credential expired.",
	})
	m.AcceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_accept_errors_total",
		Help: "Accept errors a listener paused on and outlived, by errno: EMFILE, ENFILE (out of descriptors), ENOBUFS, ENOMEM.",
	}, []string{"errno"})
	m.Refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_connections_refused_total",
		Help: "Client connections refused at accept, by limit: max_conns_per_ip (429), max_conns (503), proxy_untrusted (a peer outside trusted_proxies with proxy_protocol on; closed), proxy_header (a malformed, oversized or late PROXY header; closed), flood_backoff (an address cut for flooding lately, gateway.flood_backoff: 429, or closed before the TLS handshake).",
	}, []string{"limit"})
	m.LocalDialErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_upstream_local_dial_errors_total",
		Help: "Dials to nodes that failed on the gateway's side, not the node's, by pool, node and reason: no_source_port (no ephemeral port left from a source address toward the node), no_source_addr (a source_addrs address not on this host), no_descriptors (EMFILE, ENFILE), no_memory (ENOBUFS, ENOMEM). They do not count against the node's health.",
	}, []string{"pool", "node", "reason"})
	m.ProxyErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_proxy_errors_total",
		Help: "Plain HTTP requests a node of the pool failed to answer (a connection refused, reset or timed out, the request failing on its way), each try counted; logged at most once a second.",
	}, []string{"pool"})
	m.TLSReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_tls_reloads_total",
		Help: "Loadings of the TLS listener's certificate, key and CA files after one of them changed, by result (ok, error); an error keeps the certificates in force. A config reload loads them too, counted in wsgate_reloads_total.",
	}, []string{"result"})
	m.TunnelStarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_tunnels_started_total",
		Help: "Tunnels started, by the engine that runs them: epoll (the event loops of gateway.pollers), epoll-tls (the event loops, a TLS 1.3 client's records included) or goroutines (a TLS 1.2 client's tunnel, a tunnel to a TLS node of an http1 pool, or every tunnel with gateway.tunnel_engine = \"goroutines\"); a tunnel to an h2 pool's node runs on the event loops.",
	}, []string{"engine"})
	m.RebalanceMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_rebalance_moves_total",
		Help: "Tunnels closed with 1001 to move their clients off a node holding more than its share of the pool ([pools.rebalance]), by pool and node.",
	}, []string{"pool", "node"})
	m.StartedOn = map[string]prometheus.Counter{
		"epoll":      m.TunnelStarts.WithLabelValues("epoll"),
		"goroutines": m.TunnelStarts.WithLabelValues("goroutines"),
		"epoll-tls":  m.TunnelStarts.WithLabelValues("epoll-tls"),
	}
	m.TLSRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_tls_records_total",
		Help: "TLS handshakes done on the client listener, by who runs the connection's records from then on (layer: wsgate, whose tunnels run them on the event loops; crypto_tls, whose tunnels run on goroutines) and why (reason: tls13; tls12, tls11, tls10; other: a TLS 1.3 handshake whose record layer could not be taken).",
	}, []string{"layer", "reason"})
	m.Reg.MustRegister(m.AcceptErrors, m.Refused, m.LocalDialErrors, m.ProxyErrors, m.TLSReloads, m.TunnelStarts, m.RebalanceMoves, m.TLSRecords,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_tunnel_pollers",
			Help: "Event loops of the epoll tunnel engine running (gateway.pollers); 0 until the first tunnel on it.",
		}, func() float64 { return float64(tunnel.Pollers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_client_connections",
			Help: "Open client connections, counted from accept: handshakes in flight, HTTP keep-alive connections and tunnels.",
		}, func() float64 { return float64(live.OpenConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_client_connections_limit",
			Help: "max_conns in force: the configured value, held to what the open-file limit carries.",
		}, func() float64 { return float64(live.ConnLimit()) }))
	m.Generation.Set(1)
	bi := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "wsgate_build_info",
		Help:        "Always 1; the labels say which build runs: module version, VCS revision (unknown when built without VCS information) and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	build.Set(1)
	for _, r := range tunnel.EndReasons {
		m.tunnelEnds.WithLabelValues(r.String())
	}
	m.Reg.MustRegister(build, m.pluginCalls, m.PluginSeconds, m.Revocations, m.Expiries,
		m.Reloads, m.Generation, m.handshakes, m.handshakeSeconds, m.closes, m.tunnelEnds, m.Drains,
		m.probes, m.probeSeconds, m.transitions,
		&liveCollector{live: live},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handshake counts one handshake's result and its latency since start.
func (m *Metrics) Handshake(result string, start time.Time) {
	m.handshakes.WithLabelValues(result).Inc()
	m.handshakeSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
}

// ForgetNode drops the series of a node that has left its pool for good
// (the node registry forgot it: no pool names it, no tunnel or lease
// holds it), so nodes that come and go, by reloads or discovery, leave
// no series behind. An address named again later starts from zero.
func (m *Metrics) ForgetNode(pool, addr string) {
	l := prometheus.Labels{"pool": pool, "node": addr}
	m.probes.DeletePartialMatch(l)
	m.transitions.DeletePartialMatch(l)
	m.LocalDialErrors.DeletePartialMatch(l)
	m.RebalanceMoves.DeletePartialMatch(l)
}

// ForgetPool drops the pool-wide series of a pool that has left the
// config; its nodes' series go with the nodes (ForgetNode).
func (m *Metrics) ForgetPool(pool string) {
	m.probeSeconds.DeleteLabelValues(pool)
	m.ProxyErrors.DeleteLabelValues(pool)
}

// TunnelEnded counts why a tunnel ended and its close codes.
func (m *Metrics) TunnelEnded(st tunnel.Stats) {
	m.tunnelEnds.WithLabelValues(st.End.String()).Inc()
	for _, c := range [...]struct {
		code uint16
		side string
	}{
		{st.ClientCloseCode, "client"},
		{st.NodeCloseCode, "node"},
		{st.GatewayToClientCode, "gateway_to_client"},
		{st.GatewayToNodeCode, "gateway_to_node"},
	} {
		if c.code != 0 {
			m.closes.WithLabelValues(codeLabel(c.code), c.side).Inc()
		}
	}
}

// codeLabel keeps the code label's values bounded: registered codes as
// numbers, application ranges folded.
func codeLabel(c uint16) string {
	switch {
	case c >= 1000 && c <= 1015:
		return strconv.Itoa(int(c))
	case c >= 3000 && c <= 3999:
		return "3xxx"
	case c >= 4000 && c <= 4999:
		return "4xxx"
	}
	return "other"
}

var (
	descTunnels     = prometheus.NewDesc("wsgate_tunnels", "Live WebSocket tunnels.", nil, nil)
	descConnections = prometheus.NewDesc("wsgate_connections", "Open connections (leases) per pool and node.", []string{"pool", "node"}, nil)
	descMaxConns    = prometheus.NewDesc("wsgate_node_max_connections", "Connection cap per pool and node (0 = unlimited).", []string{"pool", "node"}, nil)
	descState       = prometheus.NewDesc("wsgate_node_state", "1 for the node's current state, 0 for the others.", []string{"pool", "node", "state"}, nil)
	descH2Conns     = prometheus.NewDesc("wsgate_upstream_h2_connections", "HTTP/2 connections to each node of a pool with protocol = \"h2\", by state: open (taking streams) or closing (a GOAWAY or a retired set, waiting for their streams to end).", []string{"pool", "node", "state"}, nil)
	descFrames      = prometheus.NewDesc("wsgate_frames_total", "WebSocket frames forwarded, by direction (to_node, to_client).", []string{"direction"}, nil)
	descBytes       = prometheus.NewDesc("wsgate_bytes_total", "Bytes forwarded by tunnels, by direction (to_node, to_client).", []string{"direction"}, nil)
)

var nodeStates = []balancer.State{balancer.StateUp, balancer.StateDown, balancer.StateDraining, balancer.StateDrained, balancer.StateEjected}

// ProbeObserver counts one pool's health probes and node transitions; it
// is the pool's health.Observer.
type ProbeObserver struct {
	m    *Metrics
	pool string
}

// ProbeObserver returns the observer of pool's health probes.
func (m *Metrics) ProbeObserver(pool string) ProbeObserver {
	return ProbeObserver{m: m, pool: pool}
}

// ProbeDone counts one probe of the node at addr and its latency.
func (o ProbeObserver) ProbeDone(addr string, ok bool, latency time.Duration) {
	result := "fail"
	if ok {
		result = "pass"
	}
	o.m.probes.WithLabelValues(o.pool, addr, result).Inc()
	o.m.probeSeconds.WithLabelValues(o.pool).Observe(latency.Seconds())
}

// StateChanged counts one transition of the node at addr.
func (o ProbeObserver) StateChanged(addr string, from, to health.State) {
	o.m.transitions.WithLabelValues(o.pool, addr, to.String()).Inc()
}

// PluginObserver counts auth plugin decisions; it is the plugin host's
// observer.
type PluginObserver struct{ m *Metrics }

// PluginObserver returns the observer of the auth plugins' decisions.
func (m *Metrics) PluginObserver() PluginObserver { return PluginObserver{m: m} }

// Observe counts one decision of plugin and, if the plugin was called,
// its latency.
func (o PluginObserver) Observe(plugin string, out pluginhost.Outcome, cached bool, latency time.Duration) {
	o.m.pluginCalls.WithLabelValues(plugin, out.String(), strconv.FormatBool(cached)).Inc()
	if !cached {
		o.m.PluginSeconds.WithLabelValues(plugin).Observe(latency.Seconds())
	}
}

// handshakeResults are the values of the result label.
var handshakeResults = []string{"ok", "bad_request", "origin", "auth_denied", "auth_unavailable", "no_capacity", "upstream_error", "upstream_refused", "local_dial_error", "client_gone", "no_route", "ip_rate", "ip_conns", "max_conns", "admission"}

// HandshakeCounts reads the handshake counters for the admin API.
func (m *Metrics) HandshakeCounts() map[string]uint64 {
	out := make(map[string]uint64, len(handshakeResults))
	var d dto.Metric
	for _, r := range handshakeResults {
		if err := m.handshakes.WithLabelValues(r).Write(&d); err == nil {
			out[r] = uint64(d.GetCounter().GetValue())
		}
	}
	return out
}

// liveCollector reads gauges and frame totals from the running gateway at
// scrape time.
type liveCollector struct{ live Live }

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTunnels, descConnections, descMaxConns, descState, descH2Conns, descFrames, descBytes} {
		ch <- d
	}
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descTunnels, prometheus.GaugeValue, float64(c.live.LiveTunnels()))
	c.live.EachNode(func(pool string, n *balancer.Node) {
		ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(n.Live()), pool, n.Addr())
		ch <- prometheus.MustNewConstMetric(descMaxConns, prometheus.GaugeValue, float64(n.MaxConns()), pool, n.Addr())
		cur := n.State()
		for _, st := range nodeStates {
			v := 0.0
			if st == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, pool, n.Addr(), st.String())
		}
	})
	c.live.EachH2(func(pool, node string, open, closing int) {
		ch <- prometheus.MustNewConstMetric(descH2Conns, prometheus.GaugeValue, float64(open), pool, node, "open")
		ch <- prometheus.MustNewConstMetric(descH2Conns, prometheus.GaugeValue, float64(closing), pool, node, "closing")
	})
	t := c.live.TunnelTotals()
	ch <- prometheus.MustNewConstMetric(descFrames, prometheus.CounterValue, float64(t.FramesToNode), "to_node")
	ch <- prometheus.MustNewConstMetric(descFrames, prometheus.CounterValue, float64(t.FramesToClient), "to_client")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.BytesToNode), "to_node")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.BytesToClient), "to_client")
}

var (
	_ health.Observer      = ProbeObserver{}
	_ pluginhost.Observer  = PluginObserver{}
	_ prometheus.Collector = (*liveCollector)(nil)
)
