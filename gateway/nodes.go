package gateway

import (
	"context"
	"sort"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/registry"
)

// poolList returns the pools sorted by name.
func (s *Server) poolList() []*pool {
	pools := s.current().pools
	ps := make([]*pool, 0, len(pools))
	for _, p := range pools {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	return ps
}

// nodesJSON is the answer of GET /api/nodes.
type nodesJSON struct {
	Ready      bool                      `json:"ready"`
	Draining   bool                      `json:"draining"`
	Tunnels    int                       `json:"tunnels"`
	Handshakes map[string]uint64         `json:"handshakes"`
	Frames     directionJSON             `json:"frames"`
	Bytes      directionJSON             `json:"bytes"`
	Pools      []poolJSON                `json:"pools"`
	Generation uint64                    `json:"generation"`
	Plugins    []pluginhost.PluginStatus `json:"plugins"`
	Reload     ReloadStatus              `json:"reload"`
}

type directionJSON struct {
	ToNode   uint64 `json:"to_node"`
	ToClient uint64 `json:"to_client"`
}

type poolJSON struct {
	Name    string     `json:"name"`
	Balance string     `json:"balance"`
	Nodes   []nodeJSON `json:"nodes"`
}

// nodeJSON is one node as the admin API shows it.
type nodeJSON struct {
	Addr     string     `json:"addr"`
	State    string     `json:"state"`
	Live     int        `json:"live"`
	MaxConns int        `json:"max_conns"`
	Weight   int        `json:"weight"`
	Check    *checkJSON `json:"check,omitempty"`
}

// checkJSON is the node's last health check, when the pool checks health.
type checkJSON struct {
	Last                string  `json:"last,omitempty"`
	LatencyMS           float64 `json:"latency_ms"`
	Result              string  `json:"result"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	ConsecutivePasses   int     `json:"consecutive_passes"`
	PassiveFailures     int     `json:"passive_failures"`
	AgentWeight         int     `json:"agent_weight,omitempty"`
	AgentLoad           int     `json:"agent_load,omitempty"`
	AdminDrain          bool    `json:"admin_drain"`
}

func (s *Server) nodesView() nodesJSON {
	t := s.tunnels.Totals()
	v := nodesJSON{
		Generation: s.current().n,
		Plugins:    s.pluginStatus(),
		Reload:     s.LastReload(),
		Ready:      s.ready.Load(),
		Draining:   s.draining.Load(),
		Tunnels:    s.tunnels.Len(),
		Handshakes: s.metrics.handshakeCounts(),
		Frames:     directionJSON{ToNode: t.FramesToNode, ToClient: t.FramesToClient},
		Bytes:      directionJSON{ToNode: t.BytesToNode, ToClient: t.BytesToClient},
	}
	for _, p := range s.poolList() {
		pj := poolJSON{Name: p.name, Balance: p.balance}
		for _, n := range p.bal.Nodes() {
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

func (s *Server) nodeView(p *pool, n *balancer.Node) nodeJSON {
	return nodeJSON{
		Addr:     n.Addr(),
		State:    n.State().String(),
		Live:     n.Live(),
		MaxConns: n.MaxConns(),
		Weight:   n.Weight(),
		Check:    p.checkView(n.Addr()),
	}
}

// drainNode stops new connections to n; with migrate it also closes n's
// tunnels with 1001, spread over drain_window, so their clients reconnect
// to the other nodes. It returns how many tunnels it is moving.
func (s *Server) drainNode(p *pool, n *balancer.Node, migrate bool) int {
	p.drain(n)
	if !migrate {
		s.metrics.drains.WithLabelValues("node").Inc()
		return 0
	}
	s.metrics.drains.WithLabelValues("node_migrate").Inc()
	ts := s.tunnels.Retire(n)
	window := s.current().cfg.Gateway.DrainWindow.Duration
	s.log.Info("draining node", "pool", p.name, "node", n.Addr(), "tunnels", len(ts), "window", window)
	go registry.Spread(context.Background(), ts, window, "node drained")
	return len(ts)
}

// undrainNode lets n take new connections again (once healthy).
func (s *Server) undrainNode(p *pool, n *balancer.Node) {
	p.undrain(n)
	s.tunnels.Unretire(n)
	s.log.Info("node undrained", "pool", p.name, "node", n.Addr())
}
