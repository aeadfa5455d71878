package gateway

import (
	"log/slog"
	"net"
	"net/netip"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/discover"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/internal/discovery"
)

// newDiscovery returns s's [pools.discovery] watchers (none running yet),
// which apply the nodes they find through s.swap and hold them to the
// pools' node policy.
func newDiscovery(s *Server) *discover.Set {
	return discover.New(discover.Options{
		Gateway:    discoveryTarget{s},
		Log:        s.log,
		Registerer: s.metrics.Reg,
		Keep: func(spec conf.Discovery, nodes []conf.Node) []conf.Node {
			return upstream.NewNodePolicy(spec).Keep(nodes)
		},
		Screen: func(spec conf.Discovery, src discovery.Source, log *slog.Logger) discovery.Source {
			return upstream.NewPolicySource(src, upstream.NewNodePolicy(spec), log)
		},
	})
}

// discoveryTarget is the Server as its discovery watchers change it (see
// discover.Gateway).
type discoveryTarget struct{ s *Server }

// ApplyDiscovered calls take with reload.mu held, unless the gateway is
// shutting down, and then swaps the running config in again, the nodes
// take recorded filled in (see discover.Set.Fill): the nodes the pool did
// not have are added and health-checked, the ones it loses are drained.
// Who holds what: reload.mu is taken here, and disc's own lock only under
// it (by take, and by Fill in swap), as in apply, which holds reload.mu
// when it calls disc.Sync.
func (d discoveryTarget) ApplyDiscovered(take func(listening []netip.AddrPort) bool) error {
	s := d.s
	s.reload.mu.Lock() // before disc's lock, as in apply
	defer s.reload.mu.Unlock()
	if s.draining.Load() {
		return nil
	}
	if !take(s.ownAddrs()) {
		return nil
	}
	_, err := s.swap(s.current().cfg, byDiscovery, nil)
	return err
}

// ownAddrs returns the addresses this gateway listens on: its client,
// TLS and admin listeners. The caller holds reload.mu.
func (s *Server) ownAddrs() []netip.AddrPort {
	var out []netip.AddrPort
	add := func(ln net.Listener) {
		if ln == nil {
			return
		}
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	for _, ln := range s.listeners {
		add(ln)
	}
	add(s.tlsLn)
	add(s.adminLn)
	return out
}

var _ discover.Gateway = discoveryTarget{}
