package gateway

import (
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// liveSource is what the metrics read from the running gateway at scrape
// time: the live tunnels, the pools' nodes and the client connections.
type liveSource struct{ s *Server }

// LiveTunnels is the number of live tunnels.
func (l liveSource) LiveTunnels() int { return l.s.tunnels.Len() }

// TunnelTotals are the frames and bytes every tunnel forwarded.
func (l liveSource) TunnelTotals() tunnel.Stats { return l.s.tunnels.Totals() }

// EachNode calls fn for every node of every pool in force, pools by name.
func (l liveSource) EachNode(fn func(pool string, n *balancer.Node)) {
	for _, p := range l.s.poolList() {
		for _, n := range p.Balancer.Nodes() {
			fn(p.Name, n)
		}
	}
}

// EachH2 calls fn with each "h2" pool's connections to each node.
func (l liveSource) EachH2(fn func(pool, node string, open, closing int)) {
	for _, p := range l.s.poolList() {
		for _, n := range p.Balancer.Nodes() {
			if set := p.H2[n]; set != nil {
				st := set.Stats()
				fn(p.Name, n.Addr(), st.Conns, st.Closing)
			}
		}
	}
}

// OpenConns is the number of client connections open, counted from accept.
func (l liveSource) OpenConns() int64 { return l.s.limits.Open() }

// ConnLimit is max_conns as in force (held to the open-file limit).
func (l liveSource) ConnLimit() int64 { _, eff, _ := l.s.limits.Limits(); return eff }

var _ telemetry.Live = liveSource{}

// countDialError counts one dial to node that failed on the gateway's side.
func (s *Server) countDialError(pool, node, reason string) {
	s.metrics.LocalDialErrors.WithLabelValues(pool, node, reason).Inc()
}
