package gateway

import (
	"context"
	"sort"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// poolList returns the pools sorted by name.
func (s *Server) poolList() []*upstream.Pool {
	pools := s.current().pools
	ps := make([]*upstream.Pool, 0, len(pools))
	for _, p := range pools {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps
}

// nodesView is the answer of GET /api/nodes.
func (s *Server) nodesView() admin.Nodes {
	t := s.tunnels.Totals()
	ready, _ := s.readiness()
	v := admin.Nodes{
		Generation: s.current().n,
		Plugins:    s.pluginStatus(),
		Reload:     s.LastReload(),
		Ready:      ready,
		Draining:   s.draining.Load(),
		Tunnels:    s.tunnels.Len(),
		Handshakes: s.metrics.HandshakeCounts(),
		Frames:     admin.Direction{ToNode: t.FramesToNode, ToClient: t.FramesToClient},
		Bytes:      admin.Direction{ToNode: t.BytesToNode, ToClient: t.BytesToClient},
	}
	for _, p := range s.poolList() {
		pj := admin.Pool{Name: p.Name, Balance: p.Balance}
		for _, n := range p.Balancer.Nodes() {
			pj.Nodes = append(pj.Nodes, s.nodeView(p, n))
		}
		v.Pools = append(v.Pools, pj)
	}
	return v
}

func (s *Server) pluginStatus() []pluginhost.PluginStatus {
	if s.plugins == nil {
		return nil
	}
	return s.plugins.Status()
}

// nodeView is n as the admin API shows it.
func (s *Server) nodeView(p *upstream.Pool, n *balancer.Node) admin.Node {
	return admin.Node{
		Addr:     n.Addr(),
		State:    n.State().String(),
		Live:     n.Live(),
		MaxConns: n.MaxConns(),
		Weight:   n.Weight(),
		// The same fields, in the same order: the conversion compiles
		// only while the two types agree.
		Check: (*admin.Check)(p.CheckView(n.Addr())),
	}
}

// drainNode stops new connections to n; with migrate it also closes n's
// tunnels with 1001, spread over drain_window, so their clients reconnect
// to the other nodes. It returns how many tunnels it is moving.
func (s *Server) drainNode(p *upstream.Pool, n *balancer.Node, migrate bool) int {
	p.Drain(n)
	if !migrate {
		s.metrics.Drains.WithLabelValues("node").Inc()
		return 0
	}
	s.metrics.Drains.WithLabelValues("node_migrate").Inc()
	ts := s.tunnels.Retire(n)
	window := s.current().cfg.Gateway.DrainWindow.Duration
	s.log.Info("draining node", "pool", p.Name, "node", n.Addr(), "tunnels", len(ts), "window", window)
	go registry.Spread(context.Background(), ts, window, "node drained")
	return len(ts)
}

// undrainNode lets n take new connections again (once healthy).
func (s *Server) undrainNode(p *upstream.Pool, n *balancer.Node) {
	p.Undrain(n)
	s.tunnels.Unretire(n)
	s.log.Info("node undrained", "pool", p.Name, "node", n.Addr())
}
