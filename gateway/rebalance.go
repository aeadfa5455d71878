package gateway

import "github.com/wsgate/wsgate/gateway/internal/rebalance"

// rebalanceView is the Server as the rebalancer reads it.
type rebalanceView struct{ s *Server }

// Pools returns the number of the generation in force and its pools that
// have a [pools.rebalance] table, each with its nodes now.
func (v rebalanceView) Pools() (uint64, []rebalance.Pool) {
	g := v.s.current()
	var ps []rebalance.Pool
	for _, p := range g.pools {
		if rc := p.Conf.Rebalance; rc != nil {
			ps = append(ps, rebalance.Pool{Name: p.Name, Nodes: p.Balancer.Nodes(), Rebalance: *rc})
		}
	}
	return g.n, ps
}

// Moved counts one tunnel moved off the node at addr in pool.
func (v rebalanceView) Moved(pool, addr string) {
	v.s.metrics.RebalanceMoves.WithLabelValues(pool, addr).Inc()
}

var _ rebalance.Gateway = rebalanceView{}
