package conf

import "time"

// Defaults are set before the file is decoded over them, so a key left out
// keeps its default and a key written with a zero value is kept (and then
// validated). Each default says why it is what it is.

// setDefaults fills the sections that always exist.
func (c *Config) setDefaults() {
	c.Gateway.setDefaults()
	c.Admin.setDefaults()
	c.Log.setDefaults()
}

func (g *Gateway) setDefaults() {
	g.Listen = ":8080" // an unprivileged port on every interface
	// Hold 100k+ connections out of the box: a low default (nginx's 1024)
	// fails real WebSocket loads. The real ceiling is RLIMIT_NOFILE.
	g.MaxConns = 1_000_000
	g.MaxConnsPerIP = 0                             // unlimited: many users share one NAT address
	g.HandshakeTimeout = Duration{10 * time.Second} // ample for a slow client; frees slowloris sockets
	g.WriteTimeout = Duration{30 * time.Second}     // a reader stalled this long is gone, not slow
	g.TunnelEngine = "epoll"                        // no goroutine or buffer per idle tunnel
	g.DrainWindow = Duration{10 * time.Second}      // spread reconnects so the remaining nodes are not stampeded
	g.DrainTimeout = Duration{30 * time.Second}     // window plus time for clients to finish closing
	g.RetryAfter = Duration{1 * time.Second}        // clients add jitter; a short hint gets them back soon
	// A peer cut for flooding is refused 1s, doubling to 60s while it
	// comes back only to be cut again: an honest client behind the same
	// address (a NAT) loses at most a second on a first cut, a flooder
	// that reconnects at once makes about 7 connections in its first
	// two minutes rather than thousands. fail2ban's usual first ban is
	// 10 minutes; a minute at most keeps a mistake short.
	g.FloodBackoff = Duration{time.Second}
	g.FloodBackoffMax = Duration{time.Minute}
	// 65,536 addresses of 64 bytes or so: a few MiB at most, however
	// many addresses an attacker has.
	g.FloodBackoffAddrs = 65536
	// As nginx's http2_max_concurrent_streams and HAProxy's
	// tune.h2.max-concurrent-streams: ample for a page's WebSockets and
	// requests, small enough that one connection holds few node slots.
	g.TLS.H2MaxStreams = 100
	// HandshakeRatePerIP stays 0 (unlimited): many users share one NAT
	// address, and a fair rate depends on the application. ProxyProtocol
	// stays false and TrustedProxies empty: no address is trusted unless
	// the operator says so.
}

func (a *ACME) setDefaults() {
	a.AskTimeout = Duration{5 * time.Second} // an ask service answers in ms; a hung one must not hold handshakes
	// One stranger's name a second at most reaches the ask URL and the
	// CA, with room for a burst of real new names (a customer adding a
	// few domains at once); Let's Encrypt allows 300 new orders per
	// account every three hours.
	a.OnDemandRate = 1
	a.OnDemandBurst = 10
}

func (a *Admin) setDefaults() {
	a.Listen = "127.0.0.1:9090" // loopback only: the admin API can drain nodes
}

func (l *Log) setDefaults() {
	l.Format = "text" // what a person reads on a terminal; "json" for a collector
	// Access stays false: a line per tunnel is volume an operator asks for.
}

func (p *Pool) setDefaults() {
	p.Balance = "least_conn" // long-lived connections need least-connections, not hashing
	// A room's clients stay together unless their node would carry more
	// than 1.25 times its share: HAProxy's and Envoy's usual bound.
	p.HashBalanceFactor = 0.25
	// More than one relay replica usually holds; beyond ~28k-64k per node
	// the pool also needs source_addrs.
	p.MaxConnsPerNode = 50_000
	p.ConnectTimeout = Duration{2 * time.Second} // loopback/LAN dials take ms; fail over fast
	p.ConnectTries = 3                           // ride out one or two dead nodes before a 502
	p.Protocol = "http1"                         // what every WebSocket node speaks
	// A silent node connection (a dead host, a cut path) is noticed
	// within two intervals, as the health check notices a dead node.
	p.H2PingInterval = Duration{10 * time.Second}
	p.Health.setDefaults()
	p.Discovery.setDefaults()
	// Shared counts stay off (no redis URL). Once on, four exchanges a
	// second keep a peer's count at most a quarter second old, for one
	// Redis command each.
	p.SharedCounts.Interval = Duration{250 * time.Millisecond}
	p.SharedCounts.KeyPrefix = "wsgate:counts"
	// Admission stays off (rate 0): the rate a pool's nodes absorb
	// depends on the relay; slow_start and the caps apply meanwhile.
}

func (h *Health) setDefaults() {
	h.Path = "/healthz"
	h.Interval = Duration{2 * time.Second}  // notice a dead node within a few seconds
	h.Timeout = Duration{1 * time.Second}   // must stay below the interval
	h.Rise = 2                              // one lucky probe does not bring a node back
	h.Fall = 3                              // one lost probe does not take a node out
	h.EjectAfter = 3                        // as many failed dials as failed probes
	h.EjectFor = Duration{10 * time.Second} // several intervals: long enough to stop hammering it
}

func (d *Discovery) setDefaults() {
	// Kind stays "": a pool lists its nodes unless it asks for discovery.
	// A new or vanished relay is seen within seconds, at a few lookups a
	// minute per gateway.
	d.Interval = Duration{5 * time.Second}
}

func (n *Node) setDefaults() {
	n.Weight = 1 // equal shares
	// MaxConns stays 0 and inherits the pool's max_conns_per_node (derive).
}

func (r *Rebalance) setDefaults() {
	// 10% over the share before anyone is moved: least_conn alone keeps a
	// steady pool closer than that, so only a real skew (a node added, one
	// back from a restart) moves clients.
	r.Tolerance = 0.1
	// Ten reconnects a second is nothing to a relay, and moves a few
	// thousand clients within minutes.
	r.Rate = 10
}

func (r *Route) setDefaults() {
	r.Host = "*"
	r.PathPrefix = "/"
	r.Overflow = "http-503" // a status every client library understands
	r.MaxFrame = 1 << 20    // 1MiB: room for a document snapshot, a bound on memory
	// Pings are opt-in: a relay with its own heartbeat needs none. Once on,
	// a client gets 10s to answer, room for a phone waking its radio.
	r.PongTimeout = Duration{10 * time.Second}
	// A relay's /info or an app's REST API keeps working through the
	// gateway; plain requests pass the same checks as handshakes.
	r.PlainHTTP = "proxy"
}

func (p *Plugin) setDefaults() {
	p.Timeout = Duration{2 * time.Second} // an auth call slower than this is broken
}

// derive computes the values that follow from others, once, after
// validation.
func (c *Config) derive() {
	c.resolvePaths()
	if c.Gateway.HandshakeBurstPerIP == 0 {
		c.Gateway.HandshakeBurstPerIP = c.Gateway.HandshakeRatePerIP
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Admission.Burst == 0 {
			p.Admission.Burst = p.Admission.Rate
		}
		for j := range p.Nodes {
			if p.Nodes[j].MaxConns == 0 {
				p.Nodes[j].MaxConns = p.MaxConnsPerNode
			}
		}
	}
}
