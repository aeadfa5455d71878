package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/discovery"
)

// NodePolicy is where a pool with [pools.discovery] may connect. Whoever
// can write the pool's Redis prefix or DNS name chooses its nodes, and a
// node receives clients' upgrade requests, cookies and tokens included.
// So a discovered node is never at a link-local (a cloud's metadata
// service at 169.254.169.254), multicast, unspecified or broadcast
// address, nor at one with a zone; with allow, it is at an address inside
// one of allow's prefixes. The check is made on an answer's IP addresses
// (refused nodes never enter the pool) and again on the address each
// connection to a node, tunnel or probe, is about to connect to, so a
// node given by host name is held to it whatever the name resolves to.
// A pool without discovery has no policy: its nodes are the operator's.
// A nil *NodePolicy takes every address. It is read-only once made.
type NodePolicy struct {
	allow []netip.Prefix // nil: any address the rules above do not refuse
}

// NewNodePolicy returns the policy of a pool's discovery section, nil for
// a pool without discovery.
func NewNodePolicy(d conf.Discovery) *NodePolicy {
	if d.Kind == "" {
		return nil
	}
	p := &NodePolicy{}
	for _, a := range d.Allow {
		if pfx, err := conf.ParsePrefix(a); err == nil { // validated: never fails
			p.allow = append(p.allow, pfx)
		}
	}
	return p
}

// refusedAddrError says why a node address is refused.
type refusedAddrError struct {
	addr string
	why  string
}

func (e *refusedAddrError) Error() string {
	return "node address " + e.addr + " refused: " + e.why
}

// The reasons a node address is refused.
const (
	whyNever    = "link-local, multicast, unspecified and broadcast addresses are never taken from discovery"
	whyZone     = "an address with a zone is never taken from discovery"
	whyNotAllow = "not in pools.discovery.allow"
)

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses reach
// the IPv4 address in their last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// broadcast is the IPv4 limited broadcast address.
var broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// check returns nil when ip may be connected to, or a *refusedAddrError.
func (p *NodePolicy) check(ip netip.Addr) error {
	if p == nil {
		return nil
	}
	refuse := func(why string) error { return &refusedAddrError{addr: ip.String(), why: why} }
	if ip.Zone() != "" {
		return refuse(whyZone)
	}
	ip = ip.Unmap()
	for _, a := range []netip.Addr{ip, embeddedIPv4(ip)} {
		if a.IsValid() && (a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() || a == broadcast) {
			return refuse(whyNever)
		}
	}
	if p.allow == nil || slices.ContainsFunc(p.allow, func(pfx netip.Prefix) bool { return pfx.Contains(ip) }) {
		return nil
	}
	return refuse(whyNotAllow)
}

// embeddedIPv4 is the IPv4 address a NAT64 address reaches; the zero Addr
// for any other address.
func embeddedIPv4(ip netip.Addr) netip.Addr {
	if !ip.Is6() || !nat64.Contains(ip) {
		return netip.Addr{}
	}
	b := ip.As16()
	return netip.AddrFrom4([4]byte(b[12:]))
}

// checkNode checks a discovered node's address, host:port: an IP address
// is checked now; a host name passes, to be checked on the address it
// resolves to when a connection is made (see control).
func (p *NodePolicy) checkNode(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil
	}
	return p.check(ap.Addr())
}

// CheckAddr checks address, the resolved IP:port a connection to a node
// is about to connect to.
func (p *NodePolicy) CheckAddr(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedAddrError{addr: address, why: "not an IP address and port"}
	}
	return p.check(ap.Addr())
}

// control is a net.Dialer Control function: it refuses a connection to a
// refused address before the connect.
func (p *NodePolicy) control(_, address string, _ syscall.RawConn) error {
	return p.CheckAddr(address)
}

// addrCheck returns p as the health checker's AddrCheck, nil (the
// interface, not a nil pointer in it) without a policy.
func (p *NodePolicy) addrCheck() health.AddrCheck {
	if p == nil {
		return nil
	}
	return p
}

// Keep returns the nodes of nodes whose address p takes (all of them
// without a policy; nodes itself when none is refused).
func (p *NodePolicy) Keep(nodes []conf.Node) []conf.Node {
	if p == nil || !slices.ContainsFunc(nodes, func(n conf.Node) bool { return p.checkNode(n.Addr) != nil }) {
		return nodes
	}
	return slices.DeleteFunc(slices.Clone(nodes), func(n conf.Node) bool { return p.checkNode(n.Addr) != nil })
}

// policySource is a discovery source whose answers leave out the nodes
// its policy refuses, before the watcher sees them: an answer naming only
// refused nodes is an empty one (the pool keeps the nodes found last),
// and the discovery metrics count only the nodes taken. Each new set of
// refused nodes is logged once. Lookup is called by one watcher at a
// time.
type policySource struct {
	src     discovery.Source
	policy  *NodePolicy
	log     *slog.Logger
	refused string // the refused nodes last logged, joined
}

// NewPolicySource returns src with the nodes policy refuses left out of
// its answers, logging each new set of refused nodes to log once.
func NewPolicySource(src discovery.Source, policy *NodePolicy, log *slog.Logger) discovery.Source {
	return &policySource{src: src, policy: policy, log: log}
}

// maxLoggedNodes bounds the addresses one log line about refused nodes
// names.
const maxLoggedNodes = 20

// Lookup asks the source for its nodes and leaves out the refused ones.
func (s *policySource) Lookup(ctx context.Context) ([]discovery.Node, error) {
	nodes, err := s.src.Lookup(ctx)
	if err != nil {
		return nil, err
	}
	byWhy := map[string][]string{}
	var refused []string
	kept := nodes[:0:0]
	for _, n := range nodes {
		var re *refusedAddrError
		if err := s.policy.checkNode(n.Addr); errors.As(err, &re) {
			byWhy[re.why] = append(byWhy[re.why], n.Addr)
			refused = append(refused, n.Addr)
			continue
		}
		kept = append(kept, n)
	}
	slices.Sort(refused)
	if all := strings.Join(refused, " "); all != s.refused {
		s.refused = all
		for _, why := range []string{whyNever, whyZone, whyNotAllow} {
			if addrs := byWhy[why]; len(addrs) > 0 {
				// An answer names up to discovery.MaxNodes: the line
				// names the first few and counts them all.
				s.log.Warn("discovered nodes left out: "+why, "nodes", addrs[:min(len(addrs), maxLoggedNodes)], "count", len(addrs))
			}
		}
	}
	if len(kept) == 0 && len(refused) > 0 {
		return nil, fmt.Errorf("%w: the %d nodes it names are all refused", discovery.ErrEmpty, len(refused))
	}
	return kept, nil
}

var (
	_ health.AddrCheck = (*NodePolicy)(nil)
	_ discovery.Source = (*policySource)(nil)
)
