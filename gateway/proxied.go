package gateway

import (
	"net/netip"

	"github.com/wsgate/wsgate/gateway/internal/upgrade"
)

// trusts reports whether ip is in gateway.trusted_proxies: a peer whose
// PROXY header and X-Forwarded-For are believed.
func (g *generation) trusts(ip netip.Addr) bool { return upgrade.Trusts(g.trusted, ip) }
