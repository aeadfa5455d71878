package conf

import "slices"

// Config is a whole wsgate configuration as loaded from one file, with
// defaults applied, validated, and derived values filled in. Parse returns a
// new Config each time; the gateway treats it as read-only once loaded, so it
// is then safe for concurrent reads. A reload builds a new Config rather than
// changing one in place.
type Config struct {
	// File is the name the config was loaded from, as given to Load or Parse.
	File string `toml:"-" json:"file"`
	// Gateway holds the client-facing listener and gateway-wide limits.
	Gateway Gateway `toml:"gateway" json:"gateway"`
	// Admin holds the admin listener (metrics, API, dashboard).
	Admin Admin `toml:"admin" json:"admin"`
	// Log holds the gateway's log: its format and the access log.
	Log Log `toml:"log" json:"log"`
	// Pools are the groups of relay nodes routes send traffic to; at least one.
	Pools []Pool `toml:"pools" json:"pools"`
	// Routes map a request's host and path to a pool, first match wins; at
	// least one.
	Routes []Route `toml:"routes" json:"routes"`
	// Plugins are the auth plugins routes may name; default none.
	Plugins []Plugin `toml:"plugins" json:"plugins"`

	lines *lineIndex // where each key was written, for later errors
	// relative holds the paths resolvePaths made absolute from relative
	// ones, for error messages (see FromRelative).
	relative map[string]bool
}

// Line returns the line of the loaded file where key, a key path such as
// "plugins[0].config", was written, or where its closest enclosing table
// was; 0 when unknown. It lets a check made after loading (a plugin that
// rejects its config table) point at the file the way load errors do.
func (c *Config) Line(key string) int { return c.lines.Line(key) }

// Written reports whether the loaded file set key, a key path such as
// "gateway.max_conns", itself (rather than leaving it to its default). A
// Config built in code, not parsed, wrote nothing.
func (c *Config) Written(key string) bool {
	if c.lines == nil {
		return false
	}
	_, ok := c.lines.lines[key]
	return ok
}

// Pool returns the pool named name, or nil if there is none.
func (c *Config) Pool(name string) *Pool {
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			return &c.Pools[i]
		}
	}
	return nil
}

// Gateway is the [gateway] section: client listeners and gateway-wide limits.
// Like all sections it is plain data, read-only once loaded (see Config).
type Gateway struct {
	// Listen is the client listener address, host:port (default ":8080").
	Listen string `toml:"listen" json:"listen"`
	// Listeners are extra client listener addresses, host:port (default none).
	Listeners []string `toml:"listeners" json:"listeners"`
	// ReusePort opens the client listeners with SO_REUSEPORT, so several
	// gateway processes can share one port and the kernel spreads new
	// connections over them (default false).
	ReusePort bool `toml:"reuse_port" json:"reuse_port"`
	// MaxConns caps open client connections across the gateway, counted
	// from accept (default 1_000_000 connections; >= 1). The gateway holds
	// it to what its open-file limit carries, two descriptors a connection.
	MaxConns int `toml:"max_conns" json:"max_conns"`
	// MaxConnsPerIP caps open connections from one client IP, counted from
	// accept whatever their state (default 0, meaning unlimited; >= 0).
	MaxConnsPerIP int `toml:"max_conns_per_ip" json:"max_conns_per_ip"`
	// HandshakeRatePerIP caps new requests (handshakes, and plain HTTP
	// requests on a route) from one client IP per second, a token bucket
	// refilled at this rate; over it the request gets 429 + Retry-After
	// (default 0, meaning unlimited; >= 0).
	HandshakeRatePerIP int `toml:"handshake_rate_per_ip" json:"handshake_rate_per_ip"`
	// HandshakeBurstPerIP is the size of that bucket: how many requests
	// one IP may make at once after a quiet spell (default 0, meaning
	// handshake_rate_per_ip, one second's worth; >= 0).
	HandshakeBurstPerIP int `toml:"handshake_burst_per_ip" json:"handshake_burst_per_ip"`
	// FloodBackoff is how long the gateway refuses a peer it cut for
	// flooding: a client address whose connection was cut with
	// ENHANCE_YOUR_CALM has its new connections closed at accept, and an
	// "h2" pool's node whose connection was cut is not dialed again, for
	// this long after a first cut, twice as long after each cut in a row
	// up to flood_backoff_max, one step forgiven for each
	// flood_backoff_max without a cut (default 1s; >= 0, 0 = off).
	FloodBackoff Duration `toml:"flood_backoff" json:"flood_backoff"`
	// FloodBackoffMax is the longest flood_backoff refusal (default 60s;
	// >= flood_backoff).
	FloodBackoffMax Duration `toml:"flood_backoff_max" json:"flood_backoff_max"`
	// FloodBackoffAddrs bounds the client addresses whose back-off the
	// gateway remembers; full, a new cut forgets one at random (default
	// 65536 addresses; >= 1).
	FloodBackoffAddrs int `toml:"flood_backoff_addrs" json:"flood_backoff_addrs"`
	// ProxyProtocol makes every client listener read a PROXY protocol
	// header (version 1 or 2) at the start of each connection, from a
	// trusted_proxies address only, and take the client address it
	// carries as the connection's (default false). Read at start only.
	ProxyProtocol bool `toml:"proxy_protocol" json:"proxy_protocol"`
	// TrustedProxies are the addresses, as CIDRs ("10.0.0.0/8") or single
	// IPs, that may send a PROXY header and whose X-Forwarded-For is kept
	// (default none: no PROXY header is accepted, and every client's
	// X-Forwarded-For is replaced by its address).
	TrustedProxies []string `toml:"trusted_proxies" json:"trusted_proxies"`
	// HandshakeTimeout bounds reading the client's upgrade request and
	// completing the handshake (default 10s; > 0).
	HandshakeTimeout Duration `toml:"handshake_timeout" json:"handshake_timeout"`
	// WriteTimeout closes a tunnel whose client or node accepts no byte
	// of a pending write for this long, so a peer that stops reading
	// cannot hold the tunnel, its node slot and its buffers forever
	// (default 30s; > 0).
	WriteTimeout Duration `toml:"write_timeout" json:"write_timeout"`
	// TunnelEngine says how tunnels run after the handshake: "epoll", one
	// event loop per core for every tunnel between two TCP sockets (a TLS
	// client stays on goroutines), or "goroutines", two goroutines a
	// tunnel (default "epoll"). A reload applies it to new tunnels.
	TunnelEngine string `toml:"tunnel_engine" json:"tunnel_engine"`
	// Pollers is how many event loops the "epoll" engine runs (default
	// 0: one per core; 0-1024). Fewer cost less CPU per frame at moderate
	// rates and carry less at the most. Changing it needs a restart.
	Pollers int `toml:"pollers" json:"pollers"`
	// DrainWindow is the time over which close 1001 frames are spread when
	// draining (default 10s; >= 0).
	DrainWindow Duration `toml:"drain_window" json:"drain_window"`
	// DrainTimeout is the hard stop for a drain: connections still open after
	// it are cut (default 30s; >= drain_window).
	DrainTimeout Duration `toml:"drain_timeout" json:"drain_timeout"`
	// RetryAfter is the Retry-After sent with 503 and 429 answers (default
	// 1s; whole seconds, >= 1s).
	RetryAfter Duration `toml:"retry_after" json:"retry_after"`
	// ExpiryGrace is how long a tunnel may outlive the expiry of the
	// credential an auth plugin admitted it with (a JWT's exp) before it is
	// closed with 1008 (default 0s; >= 0).
	ExpiryGrace Duration `toml:"expiry_grace" json:"expiry_grace"`
	// RevokeRedis is a Redis URL (Redis 6.2 or later) on which gateway
	// replicas share revocations (POST /api/revoke), so each closes its
	// matching tunnels; they are stored there until their ttl passes and
	// loaded at start and after every reconnect (default "": revocations
	// apply to this gateway only).
	RevokeRedis string `toml:"revoke_redis" json:"revoke_redis"`
	// ID names this gateway process to the other gateways it shares
	// counts with ([pools.shared_counts]); every gateway on one Redis
	// needs its own (default "": the host name and process id,
	// "HOST:PID"; else 1-128 of [A-Za-z0-9._:-]).
	ID string `toml:"id" json:"id"`
	// TLS is the TLS client listener (default none).
	TLS TLS `toml:"tls" json:"tls"`
}

// TLS is the [gateway.tls] table: a client listener that terminates TLS
// (1.2 and 1.3, ALPN "http/1.1") and serves the same routes as the plain
// ones, under the same connection limits. Certificate, key and CA files are
// read at start, at every reload, and whenever one of them changes.
type TLS struct {
	// Listen is the TLS client listener address, host:port (default "":
	// no TLS listener).
	Listen string `toml:"listen" json:"listen"`
	// ClientCAFile is a PEM file of the CA certificates client
	// certificates must chain to; when set, every client must present a
	// valid certificate, whose verified chain auth plugins get in the
	// request's TLS info (default "": no client certificates asked for).
	ClientCAFile string `toml:"client_ca_file" json:"client_ca_file"`
	// Certificates are the server certificates: the first is served to a
	// client whose server name (SNI) no certificate names; the others are
	// chosen by the DNS names in their certificates, exact names before
	// wildcards (at least one when Listen is set, unless ACME is).
	Certificates []Certificate `toml:"certificates" json:"certificates"`
	// H2 offers HTTP/2 by ALPN ("h2" before "http/1.1"): a client's
	// WebSockets are then extended CONNECT streams (RFC 8441) of one
	// connection, admitted and counted one by one as HTTP/1.1 handshakes
	// are, and its plain requests are proxied as over HTTP/1.1. Applies
	// to connections accepted after a reload (default false: HTTP/1.1
	// only).
	H2 bool `toml:"h2" json:"h2"`
	// H2MaxStreams is the most streams one HTTP/2 connection may have
	// open at once, advertised as SETTINGS_MAX_CONCURRENT_STREAMS; a
	// stream beyond it is refused with RST_STREAM(REFUSED_STREAM).
	// Read at start only (default 100, as nginx and HAProxy; 1-10000).
	H2MaxStreams int `toml:"h2_max_streams" json:"h2_max_streams"`
	// ACME obtains and renews the listener's certificates from an ACME
	// CA (RFC 8555) such as Let's Encrypt (default nil: the table is
	// absent, and the certificates are the files only). Read at start
	// only: a change needs a restart.
	ACME *ACME `toml:"acme" json:"acme,omitempty"`
}

// ACME is the [gateway.tls.acme] table: the TLS listener obtains
// certificates for Domains at start, and for other names at their first
// handshake with OnDemand, and renews them at about two thirds of their
// life. It answers the CA's challenges itself: tls-alpn-01 on the TLS
// listener and http-01 on the plain listeners, before any route. A name
// that a [[gateway.tls.certificates]] file covers (exactly or by
// wildcard) is served from the file, never ordered. Like all sections it
// is plain data, read-only once loaded (see Config).
type ACME struct {
	// Directory is the https:// URL of the CA's ACME directory, such as
	// "https://acme-v02.api.letsencrypt.org/directory"; required.
	Directory string `toml:"directory" json:"directory"`
	// Email is the contact address of the ACME account, to which the CA
	// sends expiry warnings (default "": no contact).
	Email string `toml:"email" json:"email"`
	// Domains are the DNS names whose certificates are obtained at start
	// and renewed in the background, one certificate each (default none;
	// no wildcards: those need the dns-01 challenge).
	Domains []string `toml:"domains" json:"domains"`
	// Storage is where the account key and the certificates live: a
	// directory, or a redis:// or rediss:// URL; every gateway of a fleet
	// names the same one, and a lock in it makes one gateway order each
	// certificate while the others load it; required. A relative
	// directory is taken from the config file's directory.
	Storage string `toml:"storage" json:"storage"`
	// CAFile is a PEM file of the CA certificates to trust for the
	// directory's HTTPS, for a private ACME server (default "": the
	// system's roots). A relative path is taken from the config file's
	// directory.
	CAFile string `toml:"ca_file" json:"ca_file"`
	// OnDemand obtains a certificate for a server name (SNI) outside
	// Domains at its first handshake, if Ask approves the name (default
	// false).
	OnDemand bool `toml:"on_demand" json:"on_demand"`
	// Ask is the http:// or https:// URL asked, with "?domain=NAME",
	// whether NAME may have a certificate on demand: a 2xx answer is
	// yes, anything else (or no answer within AskTimeout) is no;
	// required with on_demand.
	Ask string `toml:"ask" json:"ask"`
	// AskTimeout bounds one call to Ask (default 5s; > 0, <= 1m).
	AskTimeout Duration `toml:"ask_timeout" json:"ask_timeout"`
	// OnDemandRate is how many unknown names per second may be put to
	// Ask, a token bucket shared by every handshake; a name over it gets
	// no certificate (its handshake fails) and is not asked about, so a
	// flood of strangers' server names costs at most this many calls and
	// orders (default 1 per second; >= 1).
	OnDemandRate int `toml:"on_demand_rate" json:"on_demand_rate"`
	// OnDemandBurst is the size of that bucket (default 10; >= 1).
	OnDemandBurst int `toml:"on_demand_burst" json:"on_demand_burst"`
}

// Certificate is one [[gateway.tls.certificates]] entry.
type Certificate struct {
	// CertFile is a PEM file holding the certificate, then any
	// intermediates; required. A relative path, here and in KeyFile and
	// ClientCAFile, is taken from the directory of the config file.
	CertFile string `toml:"cert_file" json:"cert_file"`
	// KeyFile is the PEM file of its private key; required.
	KeyFile string `toml:"key_file" json:"key_file"`
}

// Admin is the [admin] section: the admin listener.
// Like all sections it is plain data, read-only once loaded (see Config).
type Admin struct {
	// Listen is the admin listener address, host:port (default
	// "127.0.0.1:9090"); "" disables the admin listener.
	Listen string `toml:"listen" json:"listen"`
	// TokenEnv names the environment variable holding the admin bearer token
	// (default "", no token). A token is required when Listen is not a
	// loopback address.
	TokenEnv string `toml:"token_env" json:"token_env"`
	// Hosts are extra host names, without port, under which the admin
	// listener is reached, such as a DNS name of the machine or of a
	// reverse proxy in front of it (default none). IP addresses, localhost
	// and the host of Listen always are; a request whose Host header names
	// anything else is refused with 403, so that a DNS-rebinding web page
	// can neither read nor steer the admin API.
	Hosts []string `toml:"hosts" json:"hosts"`
}

// Log is the [log] section: the format of the gateway's log and whether
// it carries the access log. Like all sections it is plain data, read-only
// once loaded (see Config).
type Log struct {
	// Access writes one line per tunnel at its end and one per refused
	// handshake or connection to the gateway's log (default false). It
	// applies at reload.
	Access bool `toml:"access" json:"access"`
	// Format is the format of every log line: "text" (key=value) or
	// "json" (one object a line) (default "text"). It is read at start
	// only: a reload cannot change it.
	Format string `toml:"format" json:"format"`
}

// Pool is one [[pools]] entry: a group of relay nodes and how to pick one.
// Like all sections it is plain data, read-only once loaded (see Config).
type Pool struct {
	// Name identifies the pool to routes; required, unique, [a-z0-9_-]+.
	Name string `toml:"name" json:"name"`
	// Balance is the selection policy (default "least_conn"; "least_conn",
	// "round_robin", "p2c" or "hash").
	Balance string `toml:"balance" json:"balance"`
	// HashKey says where the hash policy finds its key: "path:N" (Nth path
	// segment, from 1), "query:NAME" or "header:NAME" (default ""; required
	// with balance = "hash", unused by the other policies).
	HashKey string `toml:"hash_key" json:"hash_key"`
	// HashBalanceFactor bounds the load of the hash policy: a key moves to
	// its next node rather than push its node past (1 + factor) times its
	// weighted share of the pool's open connections (default 0.25; a
	// finite number > 0; unused by the other policies).
	HashBalanceFactor float64 `toml:"hash_balance_factor" json:"hash_balance_factor"`
	// MaxConnsPerNode is the default cap of open connections per node
	// (default 50_000 connections; >= 1).
	MaxConnsPerNode int `toml:"max_conns_per_node" json:"max_conns_per_node"`
	// SourceAddrs are local IP addresses to dial nodes from, to get past the
	// ~28k-64k connections one source address can open to one node (default
	// none: the kernel picks).
	SourceAddrs []string `toml:"source_addrs" json:"source_addrs"`
	// ConnectTimeout bounds the dial plus the upstream handshake (default
	// 2s; > 0).
	ConnectTimeout Duration `toml:"connect_timeout" json:"connect_timeout"`
	// ConnectTries is the number of nodes tried per client handshake before
	// answering 502 (default 3; >= 1).
	ConnectTries int `toml:"connect_tries" json:"connect_tries"`
	// SlowStart is the time over which a node that comes up ramps from a
	// small share to its full weight, so a recovered replica is not handed
	// a whole reconnect storm at once (default 0s: off; >= 0).
	SlowStart Duration `toml:"slow_start" json:"slow_start"`
	// SendProxyV2 starts every connection the gateway opens to the pool's
	// nodes with a PROXY protocol version 2 header: the client's address
	// and the address it connected to for a handshake or plain request, a
	// LOCAL header for a health probe. A plain request then has a node
	// connection of its own (default false).
	SendProxyV2 bool `toml:"send_proxy_v2" json:"send_proxy_v2"`
	// Protocol is how WebSockets reach the pool's nodes: "http1", a
	// connection of its own per client with an HTTP/1.1 upgrade, or "h2",
	// a stream per client on a few HTTP/2 connections per node (extended
	// CONNECT, RFC 8441), cleartext or, with TLS, ALPN "h2" (default
	// "http1").
	Protocol string `toml:"protocol" json:"protocol"`
	// H2Connections is how many HTTP/2 connections the gateway spreads a
	// node's streams over with protocol = "h2"; more are opened while
	// every one is at the node's SETTINGS_MAX_CONCURRENT_STREAMS (default
	// 0: one per poller; 0-64).
	H2Connections int `toml:"h2_connections" json:"h2_connections"`
	// H2PingInterval is how often each HTTP/2 connection to a node is
	// pinged; a PING not answered before the next one is due ends the
	// connection, and its clients get 1012 (default 10s; > 0).
	H2PingInterval Duration `toml:"h2_ping_interval" json:"h2_ping_interval"`
	// TLS turns on TLS for every connection the gateway opens to the
	// pool's nodes (default nil: the table is absent, and the nodes are
	// spoken to in cleartext).
	TLS *PoolTLS `toml:"tls" json:"tls,omitempty"`
	// Health configures the active health check of the pool's nodes.
	Health Health `toml:"health" json:"health"`
	// Rebalance moves clients off nodes that hold more than their share
	// (default nil: the table is absent and nothing is moved).
	Rebalance *Rebalance `toml:"rebalance" json:"rebalance,omitempty"`
	// Admission caps the rate at which requests reach the pool's nodes.
	Admission Admission `toml:"admission" json:"admission"`
	// SharedCounts shares the pool's live counts with other gateways
	// through Redis (default off).
	SharedCounts SharedCounts `toml:"shared_counts" json:"shared_counts"`
	// Nodes are the pool's relay nodes; at least one, unless Discovery
	// finds them (then none).
	Nodes []Node `toml:"nodes" json:"nodes"`
	// Discovery finds the pool's nodes at run time instead of Nodes.
	Discovery Discovery `toml:"discovery" json:"discovery"`
}

// Discovery is a pool's [pools.discovery] section: where the gateway finds
// the pool's nodes while it runs. A node found is health-checked before it
// takes clients; a node that vanishes is drained as a reload that removes
// it would; a lookup that fails or finds nothing keeps the nodes found
// last. Like all sections it is plain data, read-only once loaded (see
// Config).
type Discovery struct {
	// Kind is "dns" or "redis" (default "": no discovery, the pool lists
	// its nodes).
	Kind string `toml:"kind" json:"kind"`
	// Name is, for "dns", the DNS name to resolve: a name starting with
	// "_" is looked up as SRV, whose records carry port and weight, any
	// other as A and AAAA; for "redis", the key prefix relays register
	// under (keys "NAME:HOST:PORT"). Required with a kind.
	Name string `toml:"name" json:"name"`
	// Port is the nodes' port for A and AAAA answers (1-65535; required
	// for a "dns" name that is not SRV, unused otherwise).
	Port int `toml:"port" json:"port"`
	// Interval is the time between two lookups, which also bounds one
	// lookup (default 5s; >= 100ms).
	Interval Duration `toml:"interval" json:"interval"`
	// Resolver is the DNS server to ask, IP:port, for "dns" (default "":
	// the system's resolvers).
	Resolver string `toml:"resolver" json:"resolver"`
	// Redis is the redis:// or rediss:// URL of the server relays
	// register in; required for "redis".
	Redis string `toml:"redis" json:"redis"`
	// Allow lists the addresses, as CIDRs ("10.0.0.0/8") or single IPs,
	// the pool's nodes may be at: checked on the addresses discovery
	// answers with and on the address of every connection to a node (a
	// host name's, once resolved). Default none: any address but the
	// link-local, multicast, unspecified, broadcast and zoned ones, which
	// are never taken.
	Allow []string `toml:"allow" json:"allow"`
}

// Same reports whether d and o describe the same discovery: the same
// source, asked the same way, with the same allowed addresses.
func (d Discovery) Same(o Discovery) bool {
	return d.Kind == o.Kind && d.Name == o.Name && d.Port == o.Port && d.Interval == o.Interval &&
		d.Resolver == o.Resolver && d.Redis == o.Redis && slices.Equal(d.Allow, o.Allow)
}

// Health is a pool's [pools.health] section: the active HTTP check.
// Like all sections it is plain data, read-only once loaded (see Config).
type Health struct {
	// Path is the HTTP path probed on each node (default "/healthz"; starts
	// with "/").
	Path string `toml:"path" json:"path"`
	// Interval is the time between probes of one node (default 2s; > 0).
	Interval Duration `toml:"interval" json:"interval"`
	// Timeout bounds one probe (default 1s; > 0 and <= interval).
	Timeout Duration `toml:"timeout" json:"timeout"`
	// Rise is the number of passing probes in a row that mark a node up
	// (default 2; >= 1).
	Rise int `toml:"rise" json:"rise"`
	// Fall is the number of failing probes in a row that mark a node down
	// (default 3; >= 1).
	Fall int `toml:"fall" json:"fall"`
	// EjectAfter is the number of failed dials or upstream handshakes in a
	// row that eject a node without waiting for a probe (default 3; >= 1).
	EjectAfter int `toml:"eject_after" json:"eject_after"`
	// EjectFor is how long an ejected node rests before probes may bring it
	// back (default 10s; > 0).
	EjectFor Duration `toml:"eject_for" json:"eject_for"`
}

// Admission is a pool's [pools.admission] section: a token bucket every
// request routed to the pool takes a token from, after the route's other
// checks and before a node is picked, so a reconnect storm reaches the
// nodes at a bounded rate. Like all sections it is plain data, read-only
// once loaded (see Config).
type Admission struct {
	// Rate is the number of requests admitted per second, the bucket's
	// refill rate; over it a request gets 503 with a jittered Retry-After,
	// or on a close-1013 route an upgrade closed with 1013 (default 0,
	// meaning no limit; >= 0).
	Rate int `toml:"rate" json:"rate"`
	// Burst is the bucket's size: how many requests are admitted at once
	// after a quiet spell (default 0, meaning rate, one second's worth;
	// >= 0).
	Burst int `toml:"burst" json:"burst"`
}

// Rebalance is a pool's [pools.rebalance] section: present, it turns
// rebalancing on. A node holding more than its weighted share of the
// pool's tunnels by more than Tolerance has tunnels closed with 1001, at
// most Rate a second across the pool, down to its share; their clients
// reconnect through the gateway to the emptier nodes. Like all sections
// it is plain data, read-only once loaded (see Config).
type Rebalance struct {
	// Tolerance is how far over its share a node may be before tunnels
	// move off it, as a fraction of the share (default 0.1, 10%; a
	// finite number > 0).
	Tolerance float64 `toml:"tolerance" json:"tolerance"`
	// Rate is the most tunnels moved per second across the pool (default
	// 10 moves per second; a finite number > 0).
	Rate float64 `toml:"rate" json:"rate"`
}

// PoolTLS is a pool's [pools.tls] table: present (even empty), every
// connection the gateway opens to the pool's nodes is TLS 1.2 or 1.3, as
// with HAProxy's "ssl" servers and nginx's proxy_ssl: each tunnel's with
// protocol = "http1" (ALPN "http/1.1"), the few HTTP/2 connections per
// node with "h2" (ALPN "h2"), health probes and plain HTTP requests. The node's
// certificate is always verified. Its files are read at start and at
// every reload; connections opened after a reload use what it read. Like
// all sections it is plain data, read-only once loaded (see Config).
type PoolTLS struct {
	// CAFile is a PEM file of the CA certificates the nodes' certificates
	// must chain to (default "": the system's roots). A relative path,
	// here and in CertFile and KeyFile, is taken from the directory of
	// the config file.
	CAFile string `toml:"ca_file" json:"ca_file"`
	// ServerName is the name sent as SNI and verified in each node's
	// certificate (default "": the host of the node's address; an IP
	// address is verified against the certificate's IP addresses and
	// sends no SNI).
	ServerName string `toml:"server_name" json:"server_name"`
	// CertFile is a PEM file of the client certificate (then any
	// intermediates) presented to nodes that ask for one (default "":
	// none; set with KeyFile or not at all).
	CertFile string `toml:"cert_file" json:"cert_file"`
	// KeyFile is the PEM file of CertFile's private key (default "").
	KeyFile string `toml:"key_file" json:"key_file"`
}

// SharedCounts is a pool's [pools.shared_counts] section: gateways in
// front of the same nodes write their live counts per node to Redis every
// interval and read each other's, and the least-loaded policies compare a
// node's local count plus the others' last reported counts. Nothing
// touches Redis on the handshake path. Like all sections it is plain data,
// read-only once loaded (see Config).
type SharedCounts struct {
	// Redis is the URL of the Redis the counts are shared on (default "":
	// off, each gateway balances by its own counts).
	Redis string `toml:"redis" json:"redis"`
	// Interval is the time between two exchanges with Redis; a gateway's
	// counts expire after 4 intervals without one (default 250ms;
	// 50ms-10s).
	Interval Duration `toml:"interval" json:"interval"`
	// KeyPrefix starts every key the counts use; gateways share counts
	// only under the same prefix and pool name (default "wsgate:counts";
	// 1-64 of [A-Za-z0-9._:-]).
	KeyPrefix string `toml:"key_prefix" json:"key_prefix"`
}

// Node is one [[pools.nodes]] entry: a relay replica.
// Like all sections it is plain data, read-only once loaded (see Config).
type Node struct {
	// Addr is the node's host:port; required, unique within its pool.
	Addr string `toml:"addr" json:"addr"`
	// Weight is the node's relative share of connections (default 1;
	// 1..1000).
	Weight int `toml:"weight" json:"weight"`
	// MaxConns caps open connections to this node (default: the pool's
	// max_conns_per_node; 0 or absent inherits it; >= 1 once loaded).
	MaxConns int `toml:"max_conns" json:"max_conns"`
}

// Route is one [[routes]] entry: which requests go to which pool, and how.
// Like all sections it is plain data, read-only once loaded (see Config).
type Route struct {
	// Host matches the request host without port, case-insensitively:
	// "*", "example.com" or "*.example.com" (default "*").
	Host string `toml:"host" json:"host"`
	// PathPrefix matches the start of the request path (default "/"; starts
	// with "/").
	PathPrefix string `toml:"path_prefix" json:"path_prefix"`
	// Pool names the pool that serves the route; required.
	Pool string `toml:"pool" json:"pool"`
	// Origins are the allowed Origin header values, such as
	// "https://app.example.com" (default none: any origin).
	Origins []string `toml:"origins" json:"origins"`
	// Auth names the [[plugins]] entries called in order to admit a client
	// (default none: no auth).
	Auth []string `toml:"auth" json:"auth"`
	// Overflow says what a client gets when no node has room: "http-503"
	// (503 + Retry-After, the default) or "close-1013" (accept, then close
	// with 1013).
	Overflow string `toml:"overflow" json:"overflow"`
	// MaxFrame is the largest frame accepted from a client before closing
	// with 1009 (default 1MiB; > 0).
	MaxFrame Size `toml:"max_frame" json:"max_frame"`
	// PingInterval makes the gateway ping a client that has sent nothing
	// for this long, between two frames, so a client whose network is
	// gone is found (default "0s": no pings; else >= 1s).
	PingInterval Duration `toml:"ping_interval" json:"ping_interval"`
	// PongTimeout ends the tunnel of a client that sends no byte for this
	// long after its ping reached it (while it takes the bytes queued
	// ahead of the ping it is waited for, up to write_timeout + this):
	// the node is told 1001 and its slot freed (default 10s; > 0; used
	// only with ping_interval).
	PongTimeout Duration `toml:"pong_timeout" json:"pong_timeout"`
	// FrameRate caps the frames one client may send per second, with a
	// burst of one second's worth; over it the client is closed with 1008
	// (default 0: no cap; >= 0).
	FrameRate int `toml:"frame_rate" json:"frame_rate"`
	// ByteRate caps the bytes one client may send per second, framing
	// included, with a burst of one second's worth; over it the client is
	// closed with 1008 (default 0: no cap; >= 0). Under either rate, a read
	// that ends no frame and brings fewer than 64 bytes counts as a frame
	// and 64 bytes, so a drip of one byte per segment is held as a flood.
	ByteRate Size `toml:"byte_rate" json:"byte_rate"`
	// PlainHTTP says what a request that is not a WebSocket upgrade gets:
	// "proxy" (default: it passes the same checks as a handshake, origins,
	// limits and the auth chain, then goes to a node as plain HTTP) or
	// "refuse" (426 Upgrade Required).
	PlainHTTP string `toml:"plain_http" json:"plain_http"`
	// AuthHeaders names the headers the route's auth chain may set upstream
	// (such as "X-User-Id"); a client's own copies are removed from every
	// request on the route, whatever the decision (default none: only the
	// headers a decision carries replace the client's).
	AuthHeaders []string `toml:"auth_headers" json:"auth_headers"`
}

// Plugin is one [[plugins]] entry: an auth plugin executable.
// Like all sections it is plain data, read-only once loaded (see Config).
type Plugin struct {
	// Name identifies the plugin to routes' auth lists; required, unique.
	Name string `toml:"name" json:"name"`
	// Path is the plugin executable; required. A relative path is taken
	// from the directory of the config file (Load makes it absolute).
	Path string `toml:"path" json:"path"`
	// SHA256 is the expected hex SHA-256 of the executable (default "", not
	// checked; else 64 hex digits).
	SHA256 string `toml:"sha256" json:"sha256"`
	// Timeout bounds one call to the plugin (default 2s; > 0).
	Timeout Duration `toml:"timeout" json:"timeout"`
	// Config is handed to the plugin as is; its keys are not checked here.
	Config map[string]any `toml:"config" json:"config"`
	// ConfigDir is the absolute directory of the config file, handed to
	// the plugin with Config so that it takes a relative path of its
	// table from there, as the gateway does (set by Load; not a key).
	ConfigDir string `toml:"-" json:"-"`
}
