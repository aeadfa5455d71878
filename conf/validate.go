package conf

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// validate checks every rule that decoding alone cannot, reporting each
// problem at the key it concerns.
func (c *Config) validate(e *errorList) {
	c.Gateway.validate(e)
	c.Admin.validate(e)
	c.Log.validate(e)
	if len(c.Pools) == 0 {
		e.add("pools", "at least one [[pools]] entry is required")
	}
	pools := make(map[string]string, len(c.Pools))
	for i := range c.Pools {
		path := indexKey("pools", i)
		c.Pools[i].validate(e, path)
		unique(e, pools, c.Pools[i].Name, joinKey(path, "name"), "pool name")
	}
	plugins := make(map[string]string, len(c.Plugins))
	for i := range c.Plugins {
		path := indexKey("plugins", i)
		c.Plugins[i].validate(e, path)
		unique(e, plugins, c.Plugins[i].Name, joinKey(path, "name"), "plugin name")
	}
	if len(c.Routes) == 0 {
		e.add("routes", "at least one [[routes]] entry is required")
	}
	for i := range c.Routes {
		c.Routes[i].validate(e, indexKey("routes", i), pools, plugins)
	}
}

// unique reports value at key if seen already has it; it records the first
// key of each value. Empty values are left to the "required" checks.
func unique(e *errorList, seen map[string]string, value, key, what string) {
	if value == "" {
		return
	}
	first, dup := seen[value]
	if !dup {
		seen[value] = key
		return
	}
	where := first
	if n := e.lines.Line(first); n > 0 {
		where = "line " + strconv.Itoa(n)
	}
	e.add(key, fmt.Sprintf("duplicate %s %q (first at %s)", what, value, where))
}

// maxPollers bounds gateway.pollers: far more event loops than any machine
// has cores.
const maxPollers = 1024

// minPingInterval bounds a route's ping_interval from below: every tunnel
// of the route is looked at once an interval.
const minPingInterval = time.Second

func (g *Gateway) validate(e *errorList) {
	checkListen(e, "gateway.listen", g.Listen)
	seen := map[string]string{g.Listen: "gateway.listen"}
	for i, a := range g.Listeners {
		key := indexKey("gateway.listeners", i)
		checkListen(e, key, a)
		unique(e, seen, a, key, "listen address")
	}
	g.TLS.validate(e, seen)
	atLeast(e, "gateway.max_conns", g.MaxConns, 1)
	atLeast(e, "gateway.max_conns_per_ip", g.MaxConnsPerIP, 0)
	atLeast(e, "gateway.handshake_rate_per_ip", g.HandshakeRatePerIP, 0)
	atLeast(e, "gateway.handshake_burst_per_ip", g.HandshakeBurstPerIP, 0)
	if g.FloodBackoff.Duration < 0 {
		e.add("gateway.flood_backoff", "must be >= 0 (0: off), got "+g.FloodBackoff.String())
	}
	if g.FloodBackoffMax.Duration < g.FloodBackoff.Duration {
		e.add("gateway.flood_backoff_max", fmt.Sprintf("must be >= flood_backoff (%s), got %s", g.FloodBackoff, g.FloodBackoffMax))
	}
	atLeast(e, "gateway.flood_backoff_addrs", g.FloodBackoffAddrs, 1)
	for i, s := range g.TrustedProxies {
		if _, err := ParsePrefix(s); err != nil {
			e.add(indexKey("gateway.trusted_proxies", i), err.Error())
		}
	}
	if g.ProxyProtocol && len(g.TrustedProxies) == 0 {
		e.add("gateway.proxy_protocol", "needs gateway.trusted_proxies: a PROXY header is accepted from those addresses only")
	}
	positive(e, "gateway.handshake_timeout", g.HandshakeTimeout)
	positive(e, "gateway.write_timeout", g.WriteTimeout)
	switch {
	case g.Pollers < 0:
		e.add("gateway.pollers", fmt.Sprintf("must be >= 0 (0: one per core), got %d", g.Pollers))
	case g.Pollers > maxPollers:
		// Each poller holds descriptors and a read buffer: a typo must
		// not cost the gateway its open-file budget.
		e.add("gateway.pollers", fmt.Sprintf("must be <= %d, got %d", maxPollers, g.Pollers))
	}
	switch g.TunnelEngine {
	case "epoll", "goroutines":
	default:
		e.add("gateway.tunnel_engine", fmt.Sprintf("must be \"epoll\" or \"goroutines\", got %q", g.TunnelEngine))
	}
	if g.DrainWindow.Duration < 0 {
		e.add("gateway.drain_window", "must be >= 0, got "+g.DrainWindow.String())
	}
	if g.DrainTimeout.Duration < g.DrainWindow.Duration {
		e.add("gateway.drain_timeout", fmt.Sprintf("must be >= drain_window (%s), got %s", g.DrainWindow, g.DrainTimeout))
	}
	if g.ExpiryGrace.Duration < 0 {
		e.add("gateway.expiry_grace", "must be >= 0, got "+g.ExpiryGrace.String())
	}
	if g.RevokeRedis != "" {
		if msg := checkRedisURL(g.RevokeRedis); msg != "" {
			e.add("gateway.revoke_redis", msg)
		}
	}
	if g.ID != "" && !isKeyPart(g.ID, maxGatewayID) {
		e.add("gateway.id", fmt.Sprintf("must be 1-%d of [A-Za-z0-9._:-], got %q", maxGatewayID, g.ID))
	}
	switch r := g.RetryAfter.Duration; {
	case r < time.Second:
		e.add("gateway.retry_after", "must be >= 1s, got "+r.String())
	case r%time.Second != 0:
		e.add("gateway.retry_after", "must be whole seconds (Retry-After has no fractions), got "+r.String())
	}
}

// validate checks the TLS listener; seen holds the plain listeners'
// addresses, which it must not repeat.
func (t *TLS) validate(e *errorList, seen map[string]string) {
	if t.H2MaxStreams < 1 || t.H2MaxStreams > 10000 {
		e.add("gateway.tls.h2_max_streams", fmt.Sprintf("must be 1-10000, got %d", t.H2MaxStreams))
	}
	if t.Listen == "" {
		if len(t.Certificates) > 0 || t.ClientCAFile != "" || t.ACME != nil {
			e.add("gateway.tls.listen", "is empty (no TLS listener) but certificates, client_ca_file or [gateway.tls.acme] are set: set the TLS listener's host:port")
		}
		return
	}
	checkListen(e, "gateway.tls.listen", t.Listen)
	unique(e, seen, t.Listen, "gateway.tls.listen", "listen address")
	if len(t.Certificates) == 0 && t.ACME == nil {
		e.add("gateway.tls", "at least one [[gateway.tls.certificates]] entry (or a [gateway.tls.acme] table) is required with a TLS listener")
	}
	if t.ACME != nil {
		t.ACME.validate(e, "gateway.tls.acme")
	}
	for i, c := range t.Certificates {
		path := indexKey("gateway.tls.certificates", i)
		if c.CertFile == "" {
			e.add(path, "cert_file is required")
		}
		if c.KeyFile == "" {
			e.add(path, "key_file is required")
		}
	}
}

// maxAskTimeout bounds gateway.tls.acme.ask_timeout: a handshake waits
// for the answer, and no client waits a minute.
const maxAskTimeout = time.Minute

// validate checks a [gateway.tls.acme] table. Nothing is ordered here:
// `wsgate -check` runs this and reads ca_file, no more.
func (a *ACME) validate(e *errorList, path string) {
	switch u, err := url.Parse(a.Directory); {
	case a.Directory == "":
		e.add(path, "directory (the https:// URL of the CA's ACME directory) is required")
	case err != nil:
		e.add(joinKey(path, "directory"), "must be an https:// URL: "+urlError(err))
	case u.Scheme != "https" || u.Host == "":
		e.add(joinKey(path, "directory"), fmt.Sprintf("must be an https:// URL (RFC 8555 speaks HTTPS only), such as \"https://acme-v02.api.letsencrypt.org/directory\", got %q", shownURL(u)))
	}
	if m := a.Email; m != "" {
		local, domain, ok := strings.Cut(m, "@")
		if !ok || local == "" || !isHostName(domain) || strings.ContainsAny(m, " <>,;\"") {
			e.add(joinKey(path, "email"), fmt.Sprintf("must be an email address such as \"ops@example.com\", got %q", m))
		}
	}
	seen := make(map[string]string, len(a.Domains))
	for i, d := range a.Domains {
		key := indexKey(joinKey(path, "domains"), i)
		switch {
		case strings.HasPrefix(d, "*."):
			e.add(key, fmt.Sprintf("%q is a wildcard: a wildcard certificate needs the dns-01 challenge, which wsgate does not answer; list the names, or use on_demand", d))
			continue
		case net.ParseIP(d) != nil:
			e.add(key, fmt.Sprintf("must be a DNS name, got the IP address %q", d))
			continue
		case checkHost(d) != nil || !strings.Contains(d, "."):
			e.add(key, fmt.Sprintf("must be a DNS name with at least two labels, such as \"ws.example.com\", got %q", d))
			continue
		}
		unique(e, seen, strings.ToLower(d), key, "domain")
	}
	switch {
	case a.Storage == "":
		e.add(path, "storage (a directory, or a redis:// URL every gateway of the fleet shares) is required")
	case IsRedisStorage(a.Storage):
		if msg := checkRedisURL(a.Storage); msg != "" {
			e.add(joinKey(path, "storage"), msg)
		}
	case strings.Contains(a.Storage, "://"):
		e.add(joinKey(path, "storage"), "must be a directory or a redis:// or rediss:// URL")
	}
	switch u, err := url.Parse(a.Ask); {
	case a.Ask == "":
		if a.OnDemand {
			e.add(joinKey(path, "on_demand"), "needs ask: the URL that approves each name, or any stranger's server name would make the gateway order certificates")
		}
	case err != nil:
		e.add(joinKey(path, "ask"), "must be an http:// or https:// URL: "+urlError(err))
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		e.add(joinKey(path, "ask"), fmt.Sprintf("must be an http:// or https:// URL without a query (\"?domain=NAME\" is added), got %q", shownURL(u)))
	case !a.OnDemand:
		e.add(joinKey(path, "ask"), "is set but on_demand is not: set on_demand = true, or remove ask")
	}
	if d := a.AskTimeout.Duration; d <= 0 || d > maxAskTimeout {
		e.add(joinKey(path, "ask_timeout"), fmt.Sprintf("must be > 0 and <= %s, got %s", maxAskTimeout, a.AskTimeout))
	}
	atLeast(e, joinKey(path, "on_demand_rate"), a.OnDemandRate, 1)
	atLeast(e, joinKey(path, "on_demand_burst"), a.OnDemandBurst, 1)
	if len(a.Domains) == 0 && !a.OnDemand {
		e.add(path, "domains is empty and on_demand is off: the table would obtain no certificate")
	}
}

// shownURL is u as an error quotes it (-check's output, the log of a
// refused reload, /api/reload's answer): its userinfo, query and fragment,
// which may hold credentials, are shown as "...".
func shownURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("...")
	}
	if c.RawQuery != "" || c.ForceQuery {
		c.RawQuery, c.ForceQuery = "...", false
	}
	if c.Fragment != "" {
		c.Fragment, c.RawFragment = "...", ""
	}
	return c.String()
}

// urlError is url.Parse's error without the URL it quotes, which may hold
// credentials.
func urlError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// IsRedisStorage reports whether an ACME storage names a Redis
// (redis:// or rediss://) rather than a directory.
func IsRedisStorage(s string) bool {
	return strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://")
}

func (a *Admin) validate(e *errorList) {
	if a.Listen == "" { // "" disables the admin listener
		return
	}
	checkListen(e, "admin.listen", a.Listen)
	if a.TokenEnv == "" && !loopbackListen(a.Listen) {
		e.add("admin.listen", fmt.Sprintf("%q is not a loopback address: set admin.token_env so the admin API needs a bearer token", a.Listen))
	}
	for i, h := range a.Hosts {
		if !isHostName(h) {
			e.add(indexKey("admin.hosts", i), fmt.Sprintf("must be a host name without scheme or port, such as \"gw1.example.com\", got %q", h))
		}
	}
}

func (l *Log) validate(e *errorList) {
	if l.Format != "text" && l.Format != "json" {
		e.add("log.format", fmt.Sprintf("must be \"text\" or \"json\", got %q", l.Format))
	}
}

// isHostName reports whether s is a DNS host name (letters, digits, '-',
// '_' and '.'; an IPv4 address passes too).
func isHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

func (p *Pool) validate(e *errorList, path string) {
	switch {
	case p.Name == "":
		e.add(path, "name is required")
	case !isName(p.Name):
		e.add(joinKey(path, "name"), fmt.Sprintf("must match [a-z0-9_-]+, got %q", p.Name))
	}
	switch p.Balance {
	case "least_conn", "round_robin", "p2c", "hash":
	default:
		e.add(joinKey(path, "balance"), fmt.Sprintf("must be \"least_conn\", \"round_robin\", \"p2c\" or \"hash\", got %q", p.Balance))
	}
	switch {
	case p.HashKey != "":
		if err := checkHashKey(p.HashKey); err != nil {
			e.add(joinKey(path, "hash_key"), err.Error())
		}
	case p.Balance == "hash":
		e.add(joinKey(path, "hash_key"), "is required with balance = \"hash\": \"path:N\" (N >= 1), \"query:NAME\" or \"header:NAME\"")
	}
	if f := p.HashBalanceFactor; !(f > 0) || math.IsInf(f, 1) {
		e.add(joinKey(path, "hash_balance_factor"), fmt.Sprintf("must be a finite number > 0, got %v", f))
	}
	atLeast(e, joinKey(path, "max_conns_per_node"), p.MaxConnsPerNode, 1)
	for i, a := range p.SourceAddrs {
		if _, err := netip.ParseAddr(a); err != nil {
			e.add(indexKey(joinKey(path, "source_addrs"), i), fmt.Sprintf("must be an IP address, got %q", a))
		}
	}
	positive(e, joinKey(path, "connect_timeout"), p.ConnectTimeout)
	atLeast(e, joinKey(path, "connect_tries"), p.ConnectTries, 1)
	switch p.Protocol {
	case "http1":
	case "h2":
		if p.SendProxyV2 {
			// A PROXY header describes one connection, and an HTTP/2
			// connection carries many clients.
			e.add(joinKey(path, "send_proxy_v2"), "cannot be used with protocol = \"h2\": a PROXY header names one client, and an HTTP/2 connection carries many (the node gets each client's address in X-Forwarded-For)")
		}
	default:
		e.add(joinKey(path, "protocol"), fmt.Sprintf("must be \"http1\" or \"h2\", got %q", p.Protocol))
	}
	if p.H2Connections < 0 || p.H2Connections > maxH2Connections {
		e.add(joinKey(path, "h2_connections"), fmt.Sprintf("must be 0 (one per poller) to %d, got %d", maxH2Connections, p.H2Connections))
	}
	positive(e, joinKey(path, "h2_ping_interval"), p.H2PingInterval)
	if p.SlowStart.Duration < 0 {
		e.add(joinKey(path, "slow_start"), "must be >= 0, got "+p.SlowStart.String())
	}
	if p.TLS != nil {
		p.TLS.validate(e, joinKey(path, "tls"))
	}
	p.Health.validate(e, joinKey(path, "health"))
	if p.Rebalance != nil {
		p.Rebalance.validate(e, joinKey(path, "rebalance"), p.Balance)
		if p.SharedCounts.Redis != "" {
			// The rebalancer plans from this gateway's own tunnels, while
			// least_conn with shared counts places a moved client by every
			// gateway's: the two would disagree and move clients forever.
			e.add(joinKey(path, "rebalance"), "cannot be used with [pools.shared_counts]: the rebalancer counts only this gateway's tunnels, so clients it moves would be placed back by the shared counts and moved again")
		}
	}
	atLeast(e, joinKey(joinKey(path, "admission"), "rate"), p.Admission.Rate, 0)
	atLeast(e, joinKey(joinKey(path, "admission"), "burst"), p.Admission.Burst, 0)
	p.SharedCounts.validate(e, joinKey(path, "shared_counts"))
	switch d := p.Discovery; {
	case d.Kind != "":
		d.validate(e, joinKey(path, "discovery"), len(p.Nodes) > 0)
	case d.Name != "" || d.Port != 0 || d.Resolver != "" || d.Redis != "" || len(d.Allow) > 0:
		e.add(joinKey(path, "discovery"), "kind (\"dns\" or \"redis\") is required: without it the section does nothing")
	case len(p.Nodes) == 0:
		e.add(joinKey(path, "nodes"), "at least one [[pools.nodes]] entry (or a [pools.discovery] section) is required")
	}
	addrs := make(map[string]string, len(p.Nodes))
	for i := range p.Nodes {
		npath := indexKey(joinKey(path, "nodes"), i)
		p.Nodes[i].validate(e, npath)
		unique(e, addrs, p.Nodes[i].Addr, joinKey(npath, "addr"), "node addr")
	}
}

// validate checks a [pools.rebalance] table of a pool balanced by
// balance: a moved client must reconnect to the emptiest node, which only
// least_conn guarantees.
func (r *Rebalance) validate(e *errorList, path, balance string) {
	if balance != "least_conn" {
		e.add(path, fmt.Sprintf("needs balance = \"least_conn\" (a moved client must reconnect to the emptiest node), got %q", balance))
	}
	for _, k := range []struct {
		key string
		v   float64
	}{{"tolerance", r.Tolerance}, {"rate", r.Rate}} {
		if !(k.v > 0) || math.IsInf(k.v, 1) {
			e.add(joinKey(path, k.key), fmt.Sprintf("must be a finite number > 0, got %v", k.v))
		}
	}
	if r.Rate > maxRebalanceRate && !math.IsInf(r.Rate, 1) {
		e.add(joinKey(path, "rate"), fmt.Sprintf("must be at most %d moves per second (each is a reconnect through the gateway: more is a storm, not a rebalance), got %v", maxRebalanceRate, r.Rate))
	}
}

// validate checks a [pools.tls] table. Its files are read by the gateway
// (upstream.LoadTLS), at start and at each reload.
func (t *PoolTLS) validate(e *errorList, path string) {
	if n := t.ServerName; n != "" && !isHostName(n) && net.ParseIP(n) == nil {
		e.add(joinKey(path, "server_name"), fmt.Sprintf("must be a DNS name or an IP address, such as \"relay.internal\", got %q", n))
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		e.add(joinKey(path, "cert_file"), "needs key_file: a client certificate goes with its private key")
	case t.KeyFile != "" && t.CertFile == "":
		e.add(joinKey(path, "key_file"), "needs cert_file: a private key goes with its client certificate")
	}
}

// maxH2Connections bounds pools.h2_connections: the point of HTTP/2 to
// the nodes is few connections, and more than one per core buys nothing.
const maxH2Connections = 64

// maxRebalanceRate bounds pools.rebalance.rate: a thousand reconnects a
// second is about what one gateway and two relays handshake on the 2-core
// bench machine (docs/benchmarks.md, handshakes per second).
const maxRebalanceRate = 1000

// Bounds of [pools.shared_counts] and gateway.id.
const (
	minSharedInterval = 50 * time.Millisecond // 20 commands a second per pool and gateway at most
	maxSharedInterval = 10 * time.Second      // a peer's counts older than this mislead more than they help
	maxKeyPrefix      = 64
	maxGatewayID      = 128
)

func (s *SharedCounts) validate(e *errorList, path string) {
	if s.Redis != "" {
		if msg := checkRedisURL(s.Redis); msg != "" {
			e.add(joinKey(path, "redis"), msg)
		}
	}
	if d := s.Interval.Duration; d < minSharedInterval || d > maxSharedInterval {
		e.add(joinKey(path, "interval"), fmt.Sprintf("must be %s-%s, got %s", minSharedInterval, maxSharedInterval, s.Interval))
	}
	if !isKeyPart(s.KeyPrefix, maxKeyPrefix) {
		e.add(joinKey(path, "key_prefix"), fmt.Sprintf("must be 1-%d of [A-Za-z0-9._:-], got %q", maxKeyPrefix, s.KeyPrefix))
	}
}

// isKeyPart reports whether s is 1 to max bytes of [A-Za-z0-9._:-]: safe
// in a Redis key, with no space and no braces (which would change the
// key's hash tag).
func isKeyPart(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return false
		}
	}
	return true
}

func (h *Health) validate(e *errorList, path string) {
	if !strings.HasPrefix(h.Path, "/") {
		e.add(joinKey(path, "path"), fmt.Sprintf("must start with \"/\", got %q", h.Path))
	}
	positive(e, joinKey(path, "interval"), h.Interval)
	positive(e, joinKey(path, "timeout"), h.Timeout)
	if h.Timeout.Duration > h.Interval.Duration && h.Interval.Duration > 0 {
		e.add(joinKey(path, "timeout"), fmt.Sprintf("must be <= interval (%s), got %s", h.Interval, h.Timeout))
	}
	atLeast(e, joinKey(path, "rise"), h.Rise, 1)
	atLeast(e, joinKey(path, "fall"), h.Fall, 1)
	atLeast(e, joinKey(path, "eject_after"), h.EjectAfter, 1)
	positive(e, joinKey(path, "eject_for"), h.EjectFor)
}

// minDiscoveryInterval bounds a discovery interval from below: every
// lookup is a DNS query or a SCAN of Redis.
const minDiscoveryInterval = 100 * time.Millisecond

// validate checks a [pools.discovery] section whose kind is set; nodes
// says the pool also lists [[pools.nodes]], which discovery replaces.
func (d *Discovery) validate(e *errorList, path string, nodes bool) {
	if nodes {
		e.add(path, "a pool with [pools.discovery] takes its nodes from discovery: remove its [[pools.nodes]] entries")
	}
	if d.Interval.Duration < minDiscoveryInterval {
		e.add(joinKey(path, "interval"), "must be >= "+minDiscoveryInterval.String()+", got "+d.Interval.String())
	}
	for i, a := range d.Allow {
		if _, err := ParsePrefix(a); err != nil {
			e.add(indexKey(joinKey(path, "allow"), i), err.Error())
		}
	}
	srv := strings.HasPrefix(d.Name, "_")
	switch d.Kind {
	case "dns":
		if !isHostName(d.Name) {
			e.add(joinKey(path, "name"), fmt.Sprintf("must be a DNS name (\"_service._tcp.\" first for SRV), got %q", d.Name))
		}
		switch {
		case srv && d.Port != 0:
			e.add(joinKey(path, "port"), "must be left out for an SRV name: its records carry the port")
		case !srv && (d.Port < 1 || d.Port > 65535):
			e.add(joinKey(path, "port"), fmt.Sprintf("must be 1-65535 for an A/AAAA name, got %d", d.Port))
		}
		if d.Resolver != "" {
			if _, err := netip.ParseAddrPort(d.Resolver); err != nil {
				e.add(joinKey(path, "resolver"), fmt.Sprintf("must be IP:port, such as \"127.0.0.1:53\", got %q", d.Resolver))
			}
		}
		if d.Redis != "" {
			e.add(joinKey(path, "redis"), "is for kind = \"redis\" only")
		}
	case "redis":
		if d.Name == "" {
			e.add(path, "name (the key prefix relays register under) is required")
		}
		if d.Port != 0 {
			e.add(joinKey(path, "port"), "is for kind = \"dns\" only: relays register host:port")
		}
		if d.Resolver != "" {
			e.add(joinKey(path, "resolver"), "is for kind = \"dns\" only")
		}
		switch msg := checkRedisURL(d.Redis); {
		case d.Redis == "":
			e.add(path, "redis (the URL relays register in) is required with kind = \"redis\"")
		case msg != "":
			e.add(joinKey(path, "redis"), msg)
		}
	default:
		e.add(joinKey(path, "kind"), fmt.Sprintf("must be \"dns\" or \"redis\", got %q", d.Kind))
	}
}

func (n *Node) validate(e *errorList, path string) {
	if n.Addr == "" {
		e.add(path, "addr is required")
	} else if err := checkHostPort(n.Addr, false); err != nil {
		e.add(joinKey(path, "addr"), err.Error())
	}
	if n.Weight < 1 || n.Weight > 1000 {
		e.add(joinKey(path, "weight"), fmt.Sprintf("must be 1..1000, got %d", n.Weight))
	}
	// 0 inherits the pool's max_conns_per_node.
	atLeast(e, joinKey(path, "max_conns"), n.MaxConns, 0)
}

func (r *Route) validate(e *errorList, path string, pools, plugins map[string]string) {
	if err := checkHost(r.Host); err != nil {
		e.add(joinKey(path, "host"), err.Error())
	}
	if !strings.HasPrefix(r.PathPrefix, "/") {
		e.add(joinKey(path, "path_prefix"), fmt.Sprintf("must start with \"/\", got %q", r.PathPrefix))
	}
	switch _, ok := pools[r.Pool]; {
	case r.Pool == "":
		e.add(path, "pool is required")
	case !ok:
		e.add(joinKey(path, "pool"), fmt.Sprintf("no pool named %q", r.Pool))
	}
	for i, o := range r.Origins {
		if err := checkOrigin(o); err != nil {
			e.add(indexKey(joinKey(path, "origins"), i), err.Error())
		}
	}
	for i, name := range r.Auth {
		if _, ok := plugins[name]; !ok {
			e.add(indexKey(joinKey(path, "auth"), i), fmt.Sprintf("no plugin named %q", name))
		}
	}
	switch r.Overflow {
	case "http-503", "close-1013":
	default:
		e.add(joinKey(path, "overflow"), fmt.Sprintf("must be \"http-503\" or \"close-1013\", got %q", r.Overflow))
	}
	if r.MaxFrame <= 0 {
		e.add(joinKey(path, "max_frame"), "must be > 0, got "+r.MaxFrame.String())
	}
	if d := r.PingInterval.Duration; d < 0 || (d > 0 && d < minPingInterval) {
		e.add(joinKey(path, "ping_interval"), "must be 0s (no pings) or >= "+minPingInterval.String()+", got "+r.PingInterval.String())
	}
	positive(e, joinKey(path, "pong_timeout"), r.PongTimeout)
	atLeast(e, joinKey(path, "frame_rate"), r.FrameRate, 0)
	if r.ByteRate < 0 {
		e.add(joinKey(path, "byte_rate"), "must be >= 0 (0: no cap), got "+r.ByteRate.String())
	}
	switch r.PlainHTTP {
	case "proxy", "refuse":
	default:
		e.add(joinKey(path, "plain_http"), fmt.Sprintf("must be \"proxy\" or \"refuse\", got %q", r.PlainHTTP))
	}
	for i, h := range r.AuthHeaders {
		if !isToken(h) {
			e.add(indexKey(joinKey(path, "auth_headers"), i), fmt.Sprintf("must be a header name (an HTTP token), got %q", h))
		}
	}
}

// isToken reports whether s is a non-empty HTTP token (RFC 9110 section
// 5.6.2), the form of a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func (p *Plugin) validate(e *errorList, path string) {
	if p.Name == "" {
		e.add(path, "name is required")
	}
	if p.Path == "" {
		e.add(path, "path is required")
	}
	if p.SHA256 != "" {
		if _, err := hex.DecodeString(p.SHA256); err != nil || len(p.SHA256) != 64 {
			e.add(joinKey(path, "sha256"), fmt.Sprintf("must be 64 hex digits, got %q", p.SHA256))
		}
	}
	positive(e, joinKey(path, "timeout"), p.Timeout)
}

func atLeast(e *errorList, key string, v, min int) {
	if v < min {
		e.add(key, fmt.Sprintf("must be >= %d, got %d", min, v))
	}
}

func positive(e *errorList, key string, d Duration) {
	if d.Duration <= 0 {
		e.add(key, "must be > 0, got "+d.String())
	}
}

// isName reports whether s matches [a-z0-9_-]+.
func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

func checkListen(e *errorList, key, addr string) {
	if err := checkHostPort(addr, true); err != nil {
		e.add(key, err.Error())
	}
}

// checkHostPort checks a host:port address; port 0 (any free port) is
// allowed only for listeners.
func checkHostPort(addr string, listen bool) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", addr)
	}
	n, err := strconv.Atoi(port)
	lo := 1
	if listen {
		lo = 0
	}
	if err != nil || n < lo || n > 65535 {
		return fmt.Errorf("port must be %d-65535, got %q", lo, addr)
	}
	return nil
}

// checkHost checks a route host: "*", "example.com" or "*.example.com".
func checkHost(h string) error {
	if h == "*" {
		return nil
	}
	name := strings.TrimPrefix(h, "*.")
	bad := name == "" || len(name) > 253
	for _, label := range strings.Split(name, ".") {
		if bad {
			break
		}
		bad = label == "" || len(label) > 63
		for i := 0; i < len(label) && !bad; i++ {
			c := label[i]
			bad = !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
		}
	}
	if bad {
		return fmt.Errorf("must be \"*\", a host name or \"*.\" and a host name, without port, got %q", h)
	}
	return nil
}

// checkOrigin checks an allowed Origin value: scheme://host[:port] and
// nothing more, as browsers send it.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("must be an origin such as \"https://app.example.com\", got %q", o)
	}
	return nil
}

// checkHashKey checks "path:N" (N >= 1), "query:NAME" or "header:NAME".
func checkHashKey(k string) error {
	kind, arg, _ := strings.Cut(k, ":")
	ok := false
	switch kind {
	case "path":
		n, err := strconv.Atoi(arg)
		ok = err == nil && n >= 1
	case "query", "header":
		ok = arg != ""
	}
	if !ok {
		return fmt.Errorf("must be \"path:N\" (N >= 1), \"query:NAME\" or \"header:NAME\", got %q", k)
	}
	return nil
}

// ParsePrefix parses a trusted_proxies or pools.discovery.allow entry: a CIDR such as "10.0.0.0/8"
// or "2001:db8::/32", or a single IP address (a /32 or /128). IPv4-mapped
// IPv6 forms are unmapped, as client addresses are.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Zone() == "" {
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return netip.Prefix{}, fmt.Errorf("must be a CIDR such as \"10.0.0.0/8\" or an IP address, got %q (an IPv4-mapped prefix shorter than /96)", s)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("must be a CIDR such as \"10.0.0.0/8\" or an IP address, got %q", s)
}

// loopbackListen reports whether a listen address binds only loopback
// (an empty host binds every interface).
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkRedisURL says what is wrong with a Redis URL, or "". The message
// never quotes the URL: it may hold a password, and config errors are
// logged and shown by the admin API.
func checkRedisURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL it quotes
		}
		return fmt.Sprintf("must be a redis:// or rediss:// URL: %v", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Sprintf("must be a redis:// or rediss:// URL, got scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return "must be a redis:// or rediss:// URL with a host"
	}
	return ""
}
