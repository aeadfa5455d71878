package discover

import (
	"net"
	"net/netip"
	"slices"
)

// reachesOwn reports whether node address addr (IP:port; a host name is
// never taken for one) is one of own, or has the port of one of own bound
// to every address and an IP of this host: loopback, or one of local's.
func reachesOwn(addr string, own []netip.AddrPort, local func() []netip.Addr) bool {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	var ips []netip.Addr
	for _, o := range own {
		if o.Port() != ap.Port() {
			continue
		}
		if o.Addr() == ip {
			return true
		}
		if !o.Addr().IsUnspecified() {
			continue
		}
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		if ips == nil {
			ips = local()
		}
		if slices.Contains(ips, ip) {
			return true
		}
	}
	return false
}

// localIPs returns the addresses of this host's interfaces.
func localIPs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return []netip.Addr{}
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}
