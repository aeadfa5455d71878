package gateway

import (
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/sharedcount"
)

// newSharedCounts returns s's [pools.shared_counts] sharers (none running
// yet): they read the nodes of the generation in force and count their
// exchanges in s's metrics.
func newSharedCounts(s *Server) *sharedcount.Set {
	return sharedcount.NewSet(sharedcount.SetConfig{
		Nodes:      s.poolNodes,
		Log:        s.log,
		Registerer: s.metrics.Reg,
	})
}

// poolNodes returns the nodes of the pool named name in the generation in
// force (none if it has gone).
func (s *Server) poolNodes(name string) []*balancer.Node {
	if p := s.current().pools[name]; p != nil {
		return p.Balancer.Nodes()
	}
	return nil
}
