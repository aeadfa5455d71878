package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// DNS finds nodes by DNS. A name starting with "_" (such as
// "_ws._tcp.relay.default.svc.cluster.local") is looked up as SRV: each
// target of the lowest priority present is resolved to its addresses, with
// the record's port, and the record's weight as node weight (held to
// 1..1000). Any other name is looked up as A and AAAA, every address with
// Port and weight 1. A DNS is safe for concurrent use.
type DNS struct {
	name string
	port int
	r    *net.Resolver
}

// NewDNS returns a DNS source for name. port is the nodes' port for A and
// AAAA answers (unused for SRV). resolver is the host:port of the DNS
// server to ask, over UDP and (for truncated answers) TCP; "" asks the
// system's resolvers (/etc/resolv.conf).
func NewDNS(name string, port int, resolver string) *DNS {
	d := &DNS{name: name, port: port, r: net.DefaultResolver}
	if resolver != "" {
		var dialer net.Dialer
		d.r = &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, resolver)
			},
		}
	}
	return d
}

// IsSRV reports whether name is looked up as SRV: it starts with "_".
func IsSRV(name string) bool { return strings.HasPrefix(name, "_") }

// Lookup resolves the name once.
func (d *DNS) Lookup(ctx context.Context) ([]Node, error) {
	if IsSRV(d.name) {
		return d.lookupSRV(ctx)
	}
	ips, err := d.lookupIP(ctx, d.name)
	if err != nil {
		return nil, err
	}
	nodes := make([]Node, 0, len(ips))
	for _, ip := range ips {
		nodes = append(nodes, Node{Addr: netip.AddrPortFrom(ip, uint16(d.port)).String(), Weight: 1})
	}
	return nodes, nil
}

// lookupIP resolves host's A and AAAA records; a name that does not
// exist or has no address is ErrEmpty.
func (d *DNS) lookupIP(ctx context.Context, host string) ([]netip.Addr, error) {
	ips, err := d.r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, dnsError(host, err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

// lookupSRV resolves the SRV records of the name, then their targets.
func (d *DNS) lookupSRV(ctx context.Context) ([]Node, error) {
	_, srvs, err := d.r.LookupSRV(ctx, "", "", d.name)
	if err != nil {
		return nil, dnsError(d.name, err)
	}
	srvs = lowestPriority(srvs)
	var nodes []Node
	for _, s := range srvs {
		if s.Target == "." || s.Port == 0 { // "." is "no service here" (RFC 2782)
			continue
		}
		ips, err := d.lookupIP(ctx, s.Target)
		if errors.Is(err, ErrEmpty) {
			continue // a target without address is skipped, the others count
		}
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			nodes = append(nodes, Node{Addr: netip.AddrPortFrom(ip, s.Port).String(), Weight: int(s.Weight)})
		}
	}
	return nodes, nil
}

// lowestPriority keeps the records of the lowest priority present: the
// others are backups RFC 2782 uses only when those are unreachable, which
// health checks, not the resolver, find out here.
func lowestPriority(srvs []*net.SRV) []*net.SRV {
	if len(srvs) == 0 {
		return nil
	}
	lo := srvs[0].Priority
	for _, s := range srvs {
		lo = min(lo, s.Priority)
	}
	out := srvs[:0:0]
	for _, s := range srvs {
		if s.Priority == lo {
			out = append(out, s)
		}
	}
	return out
}

// dnsError marks a name that does not exist, or has no record of the
// type asked, as ErrEmpty; other errors (no answer, SERVFAIL) stay what
// they are.
func dnsError(name string, err error) error {
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return fmt.Errorf("look up %s: %w", name, ErrEmpty)
	}
	return fmt.Errorf("look up %s: %w", name, err)
}
