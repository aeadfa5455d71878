package gateway

import (
	"fmt"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/gateway/internal/revoke"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// adminView is the Server as the admin API reads and steers it.
type adminView struct{ s *Server }

// Ready reports whether the server serves clients, and why not.
func (v adminView) Ready() (bool, string) { return v.s.readiness() }

// Draining reports whether the server is shutting down.
func (v adminView) Draining() bool { return v.s.draining.Load() }

// Nodes is the answer of GET /api/nodes.
func (v adminView) Nodes() admin.Nodes { return v.s.nodesView() }

// Config is the config of the generation in force.
func (v adminView) Config() *conf.Config { return v.s.current().cfg }

// Reload reloads the config file now.
func (v adminView) Reload() error { return v.s.Reload() }

// LastReload is how the last reload went, a ReloadStatus.
func (v adminView) LastReload() any { return v.s.LastReload() }

// Revoke closes and refuses the tunnels of r's subject or key.
func (v adminView) Revoke(r admin.Revocation) (published bool, closed int, err error) {
	return v.s.revocations.Revoke(revoke.Revocation{Subject: r.Subject, Key: r.Key, TTL: r.TTL})
}

// DrainNode drains the node at addr in the pool named pool (see drainNode).
func (v adminView) DrainNode(pool, addr string, migrate bool) (admin.Node, int, error) {
	p, n, err := v.node(pool, addr)
	if err != nil {
		return admin.Node{}, 0, err
	}
	moved := v.s.drainNode(p, n, migrate)
	return v.s.nodeView(p, n), moved, nil
}

// UndrainNode undrains the node at addr in the pool named pool (see
// undrainNode).
func (v adminView) UndrainNode(pool, addr string) (admin.Node, error) {
	p, n, err := v.node(pool, addr)
	if err != nil {
		return admin.Node{}, err
	}
	v.s.undrainNode(p, n)
	return v.s.nodeView(p, n), nil
}

// node finds the node at addr in the pool named name of the generation in
// force.
func (v adminView) node(name, addr string) (*upstream.Pool, *balancer.Node, error) {
	p := v.s.current().pools[name]
	if p == nil {
		return nil, nil, fmt.Errorf("pool %q: %w", name, admin.ErrNoPool)
	}
	n := p.Node(addr)
	if n == nil {
		return nil, nil, fmt.Errorf("pool %q, node %q: %w", name, addr, admin.ErrNoNode)
	}
	return p, n, nil
}

var _ admin.Gateway = adminView{}
