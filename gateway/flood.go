package gateway

import (
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/penalty"
	"github.com/wsgate/wsgate/internal/throttle"
)

// Flood back-off (gateway.flood_backoff): a client address whose
// connection the gateway cut for flooding (h2serve.CutForFlood) is
// refused at accept for a while, by every client listener (see
// edge.Listener.WithBackoff); an "h2" pool's node whose connection was
// cut is not dialed for a while (h2.Set.SetFloodBackoff, set through
// upstream.Pool.H2Backoff). Both by the same policy.

// floodPolicy is cfg's back-off policy.
func floodPolicy(cfg *conf.Config) penalty.Policy {
	return penalty.Policy{First: cfg.Gateway.FloodBackoff.Duration, Max: cfg.Gateway.FloodBackoffMax.Duration}
}

// floodLogEvery is the shortest interval between two log lines about
// clients cut for flooding; the lines carry a count.
const floodLogEvery = time.Second

// clientFloods is the back-off of client addresses cut for flooding. It
// is safe for concurrent use.
type clientFloods struct {
	*penalty.Table[netip.Addr] // refuses at accept (edge.Backoff)
	log                        *slog.Logger
	cuts                       prometheus.Counter

	mu    sync.Mutex
	lines throttle.Lines
}

func newClientFloods(cfg *conf.Config, log *slog.Logger) *clientFloods {
	return &clientFloods{
		Table: penalty.NewTable[netip.Addr](floodPolicy(cfg), cfg.Gateway.FloodBackoffAddrs),
		log:   log,
		cuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wsgate_client_flood_cuts_total",
			Help: "Client connections cut for flooding (GOAWAY ENHANCE_YOUR_CALM), each of which puts its address on the back-off of gateway.flood_backoff.",
		}),
	}
}

// set applies a reload's keys.
func (f *clientFloods) set(cfg *conf.Config) {
	f.Set(floodPolicy(cfg), cfg.Gateway.FloodBackoffAddrs)
}

// cut notes that a connection from ip was cut for flooding: the address
// is refused from now on, for as long as its streak says, logged at most
// once a second with the count of cuts since the last line.
func (f *clientFloods) cut(ip netip.Addr) {
	f.cuts.Inc()
	now := time.Now()
	d, streak := f.Cut(ip, now)
	f.mu.Lock()
	n, ok := f.lines.Note(now, floodLogEvery)
	f.mu.Unlock()
	if ok {
		f.log.Warn("client connection cut for flooding; its address's new connections are refused for a while (gateway.flood_backoff)",
			"client", ip.String(), "refused_for", d, "cuts_in_a_row", streak, "cuts", n)
	}
}

// register adds the back-off's metrics to reg: the cuts, the addresses
// remembered, and the h2 pools' nodes not dialed for a flood now.
func (f *clientFloods) register(reg *prometheus.Registry, s *Server) {
	reg.MustRegister(f.cuts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_flood_backoff_clients",
			Help: "Client addresses the flood back-off remembers: refused now, or cut lately enough that their next cut doubles the refusal (at most gateway.flood_backoff_addrs).",
		}, func() float64 { return float64(f.Sweep(time.Now())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_upstream_h2_backoff_nodes",
			Help: "Nodes of pools with protocol = \"h2\" not dialed now because a connection to them was cut for flooding lately (gateway.flood_backoff).",
		}, func() float64 { return float64(s.nodesBackedOff()) }))
}

// nodesBackedOff counts the h2 pools' nodes whose set does not dial now.
func (s *Server) nodesBackedOff() int {
	n := 0
	for _, p := range s.poolList() {
		for _, set := range p.H2 {
			if set.Backoff() > 0 {
				n++
			}
		}
	}
	return n
}
