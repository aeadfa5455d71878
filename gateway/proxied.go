package gateway

import "net/netip"

// trusts reports whether ip is in gateway.trusted_proxies.
func (g *generation) trusts(ip netip.Addr) bool {
	for _, p := range g.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
