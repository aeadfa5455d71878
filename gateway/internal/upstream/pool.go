// Package upstream is how the gateway reaches its nodes: the run-time
// pools built from [[pools]] (the balancer's view of their nodes, their
// health checkers and HTTP clients), the dialer that opens connections to
// nodes from the pools' source addresses, and the policy that holds a
// discovered pool to the addresses it may connect to. It knows nothing of
// routes, requests or tunnels: the gateway wires it to them.
package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/penalty"
	"github.com/wsgate/wsgate/internal/sockopt"
	"github.com/wsgate/wsgate/internal/throttle"
)

// Pool is a [[pools]] entry at run time: the balancer's view of its nodes,
// how to dial them, and an HTTP client per node for plain requests.
// NewPool sets its fields; they are read-only after. It is safe for
// concurrent use.
type Pool struct {
	// Name is the pool's name (pools.name).
	Name string
	// Balance is its balancing policy (pools.balance).
	Balance string
	// Balancer picks its nodes.
	Balancer *balancer.Pool
	// Health probes its nodes and owns their states.
	Health *health.Checker
	// ConnectTimeout bounds one dial to a node (pools.connect_timeout).
	ConnectTimeout time.Duration
	// Tries is how many nodes a request may try (pools.connect_tries).
	Tries int
	// Dialer opens its connections to nodes.
	Dialer *Dialer
	// HTTP holds a client per node for plain requests.
	HTTP map[*balancer.Node]*fasthttp.HostClient
	// H2 holds, with protocol = "h2", each node's HTTP/2 connections
	// (see OpenH2); nil with "http1".
	H2 map[*balancer.Node]*h2.Set
	// h2Lost is the window over which the streams of a lost HTTP/2
	// connection end (OpenH2's lost).
	h2Lost time.Duration
	// H2Backoff is how long each node's set does not dial the node
	// after a connection it cut for flooding (h2.Set.SetFloodBackoff,
	// gateway.flood_backoff); set before OpenH2.
	H2Backoff penalty.Policy
	// Conf is the config it was built from.
	Conf *conf.Pool
	// HealthConf is its checker's settings.
	HealthConf health.Config
	// SendProxy is send_proxy_v2: node connections start with a PROXY
	// header, and plain requests take a connection of their own.
	SendProxy bool
	// TLS is [pools.tls] as loaded: every connection to a node is TLS
	// (see DialNode); nil without the table.
	TLS *NodeTLS
	// Admit is [pools.admission], shared with the pool of the same name
	// in later generations so a reload keeps its tokens; a reload sets
	// its rate when it commits. NewPool takes it from the pool it
	// replaces, or makes a pool new to the config one.
	Admit Admission
}

// Admission is a pool's [pools.admission] limit, which the gateway makes
// and consults for each request that would reach a node. The pool only
// carries it from one generation to the next (see Pool.Admit).
type Admission interface {
	// Allow takes a token for one request. Without one it reports false
	// with the rate and burst in force, for the client's Retry-After.
	Allow() (ok bool, rate, burst int)
	// Set changes the rate and burst for the next requests, keeping the
	// tokens.
	Set(rate, burst int)
}

// NewPool builds the run-time pool for pc, with nt its [pools.tls] as
// loaded (LoadTLS; nil without the table). Its nodes come from reg by pool
// name and address, so a node kept, or dropped by an earlier reload and
// named again while tunnels to it are open, is the same node with its
// live count and tunnels. With old (the pool of the same name in the
// running generation) it reuses old's checker, so kept nodes keep their
// health, and old's Admit; the nodes old did not have are returned in
// added, old's nodes pc drops in removed. It changes nothing that is in
// use: the gateway's commit does, once the whole new generation is built
// (a node it registers anew is used by nobody yet). Its dialer calls
// count for each dial that fails on the gateway's side. A pool without
// old gets its Admit from newAdmission, with pc's rate and burst. An nt
// the same as old's (see NodeTLS.Same) gives way to old's, so a reload
// that read the same files keeps the nodes' TLS sessions and HTTP/2
// connections.
func NewPool(pc *conf.Pool, nt *NodeTLS, old *Pool, reg *balancer.Registry, log *slog.Logger, count func(pool, node, reason string),
	newAdmission func(rate, burst int) Admission) (p *Pool, added, removed []*balancer.Node, err error) {
	picker, err := balancer.NewPicker(pc.Balance)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	if pc.Balance == balancer.PolicyHash {
		picker = balancer.NewHash(pc.HashBalanceFactor)
	}
	d, err := newDialer(pc.Name, pc.SourceAddrs, pc.ConnectTimeout.Duration, log, count)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	d.holdTo(NewNodePolicy(pc.Discovery))
	if old != nil && old.TLS.Same(nt) {
		nt = old.TLS
	}
	p = &Pool{
		Name:           pc.Name,
		Balance:        pc.Balance,
		ConnectTimeout: pc.ConnectTimeout.Duration,
		Tries:          pc.ConnectTries,
		Dialer:         d,
		HTTP:           make(map[*balancer.Node]*fasthttp.HostClient, len(pc.Nodes)),
		Conf:           pc,
		HealthConf:     healthConfig(pc),
		SendProxy:      pc.SendProxyV2,
		TLS:            nt,
	}
	if nt != nil {
		p.HealthConf.TLS = nt
	}
	keep := map[string]*balancer.Node{}
	if old != nil {
		p.Admit = old.Admit
		p.Health = old.Health
		for _, n := range old.Balancer.Nodes() {
			keep[n.Addr()] = n
		}
	} else {
		p.Admit = newAdmission(pc.Admission.Rate, pc.Admission.Burst)
		p.Health = health.NewChecker(p.HealthConf, log.With("pool", pc.Name))
	}
	nodes := make([]*balancer.Node, 0, len(pc.Nodes))
	for _, nc := range pc.Nodes {
		n, _ := reg.Node(pc.Name, nc.Addr, nc.Weight, nc.MaxConns)
		if keep[nc.Addr] == nil {
			added = append(added, n)
		}
		delete(keep, nc.Addr)
		nodes = append(nodes, n)
		p.HTTP[n] = &fasthttp.HostClient{
			Addr:                          nc.Addr,
			Dial:                          p.dialHTTP,
			ReadTimeout:                   30 * time.Second,
			WriteTimeout:                  30 * time.Second,
			MaxIdleConnDuration:           30 * time.Second,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true, // the gateway's prepareForward sets the target
			NoDefaultUserAgentHeader:      true,
		}
	}
	for _, n := range keep {
		removed = append(removed, n)
	}
	if old != nil && p.TLS != nil && p.TLS == old.TLS {
		addrs := make(map[string]bool, len(pc.Nodes))
		for _, nc := range pc.Nodes {
			addrs[nc.Addr] = true
		}
		p.TLS.forgetExcept(addrs)
	}
	p.Balancer = balancer.NewPool(pc.Name, picker, nodes)
	return p, added, removed, nil
}

// dialHTTP opens a connection of the pool's HTTP clients: TLS (ALPN
// "http/1.1") with [pools.tls]. The clients are not told it is TLS
// (fasthttp's IsTLS): the gateway's requests to nodes keep the http
// scheme, and this dial is the one every connection to a node goes
// through.
func (p *Pool) dialHTTP(addr string) (net.Conn, error) {
	return p.DialNode(addr, nil, ALPNHTTP1, nil)
}

// healthConfig is the checker's view of a pool's settings.
func healthConfig(pc *conf.Pool) health.Config {
	h := &pc.Health
	return health.Config{
		Path:       h.Path,
		Interval:   h.Interval.Duration,
		Timeout:    h.Timeout.Duration,
		Rise:       h.Rise,
		Fall:       h.Fall,
		SlowStart:  pc.SlowStart.Duration,
		EjectAfter: h.EjectAfter,
		EjectFor:   h.EjectFor.Duration,
		ProxyLocal: pc.SendProxyV2,
		Refuse:     NewNodePolicy(pc.Discovery).addrCheck(),
	}
}

// DoOwnConn sends req to the node at addr on a connection of its own that
// starts with head (a PROXY header, before TLS with [pools.tls]), reads
// the answer into resp and closes the connection, all within timeout: a
// send_proxy_v2 pool's plain request, which cannot share a pooled
// connection whose header names another client.
func (p *Pool) DoOwnConn(addr string, head []byte, req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	// In the clear the header goes out with the request, in one write;
	// with TLS it goes before the handshake.
	pre, dialHead := head, []byte(nil)
	if p.TLS != nil {
		pre, dialHead = nil, head
	}
	conn, err := p.DialNode(addr, dialHead, ALPNHTTP1, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	bw := bufio.NewWriter(conn)
	_, _ = bw.Write(pre)
	// Connection: close for the node only: the client's connection stays
	// as the client asked (the server reads req and resp after this).
	closing := req.Header.ConnectionClose()
	req.SetConnectionClose()
	err = req.Write(bw)
	if !closing {
		req.Header.ResetConnectionClose()
	}
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	resp.Header.DisableNormalizing() // as the pooled clients read answers
	resp.SkipBody = req.Header.IsHead()
	if err := resp.Read(bufio.NewReader(conn)); err != nil {
		return err
	}
	resp.Header.ResetConnectionClose()
	return nil
}

// ApplyNodeSettings gives every node the weight and cap the pool's config
// sets for it; they apply from the next pick and never evict.
func (p *Pool) ApplyNodeSettings() {
	for _, nc := range p.Conf.Nodes {
		if n := p.Node(nc.Addr); n != nil {
			n.SetWeight(nc.Weight)
			n.SetMaxConns(nc.MaxConns)
		}
	}
}

// Node returns the pool's node at addr, or nil.
func (p *Pool) Node(addr string) *balancer.Node {
	for _, n := range p.Balancer.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// StartHealth begins probing every node, reporting to obs.
func (p *Pool) StartHealth(obs health.Observer) {
	p.Health.SetObserver(obs)
	for _, n := range p.Balancer.Nodes() {
		p.Health.Add(NodeTarget{n})
	}
}

// CloseIdle closes the pool's idle HTTP connections to its nodes.
func (p *Pool) CloseIdle() {
	for _, hc := range p.HTTP {
		hc.CloseIdleConnections()
	}
}

// Close stops the pool's probes and idle HTTP connections, and its HTTP/2
// connections once their streams have ended.
func (p *Pool) Close() {
	p.Health.Stop()
	p.CloseIdle()
	p.RetireH2(nil)
}

// Drain and Undrain go through the health checker, which owns node
// states. Drain stops new connections to n.
func (p *Pool) Drain(n *balancer.Node) { _ = p.Health.Drain(n.Addr()) }

// Undrain lets n take new connections again, once healthy.
func (p *Pool) Undrain(n *balancer.Node) { _ = p.Health.Undrain(n.Addr()) }

// CheckView is a node's last health check as the admin API shows it; its
// fields are those of the admin API's JSON object.
type CheckView struct {
	Last                string // RFC 3339, UTC; "" before the first check
	LatencyMS           float64
	Result              string
	ConsecutiveFailures int
	ConsecutivePasses   int
	PassiveFailures     int
	AgentWeight         int
	AgentLoad           int
	AdminDrain          bool
}

// CheckView is the node's last health check for the admin API, nil when
// the pool's checker does not know addr.
func (p *Pool) CheckView(addr string) *CheckView {
	st, ok := p.Health.Status(addr)
	if !ok {
		return nil
	}
	c := &CheckView{
		LatencyMS:           float64(st.LastLatency.Microseconds()) / 1000,
		Result:              st.LastResult,
		ConsecutiveFailures: st.ConsecutiveFailures,
		ConsecutivePasses:   st.ConsecutivePasses,
		PassiveFailures:     st.PassiveFailures,
		AgentWeight:         st.AgentWeight,
		AgentLoad:           st.AgentLoad,
		AdminDrain:          st.AdminDrain,
	}
	if !st.LastCheck.IsZero() {
		c.Last = st.LastCheck.UTC().Format(time.RFC3339Nano)
	}
	return c
}

// NodeTarget lets the health checker steer a balancer node; the two
// packages do not know each other.
type NodeTarget struct{ *balancer.Node }

// SetState maps the checker's state onto the balancer's.
func (t NodeTarget) SetState(s health.State) { t.Node.SetState(balancerState(s)) }

var _ health.Target = NodeTarget{}

// balancerState is the balancer's state for the checker's state s.
func balancerState(s health.State) balancer.State {
	switch s {
	case health.StateUp:
		return balancer.StateUp
	case health.StateDraining:
		return balancer.StateDraining
	case health.StateDrained:
		return balancer.StateDrained
	case health.StateEjected:
		return balancer.StateEjected
	}
	return balancer.StateDown
}

// dialLogEvery is the shortest interval between two log lines about local
// dial failures toward one node; the lines carry a count.
const dialLogEvery = time.Second

// ErrLocalDial marks a dial that failed on the gateway's side: no port or
// source address, descriptor or kernel memory to dial from. It says
// nothing about the node, so the node is not charged with it.
var ErrLocalDial = errors.New("dial failed for a local reason")

// Dialer opens connections to nodes, rotating over the pool's source
// addresses. Each socket bound to a source address is marked
// IP_BIND_ADDRESS_NO_PORT, so its port is picked at connect against the
// whole (source, node) pair rather than at bind against the source alone:
// one source address then reaches every node ip:port up to the ephemeral
// range each, instead of all nodes together. A dial that fails for want
// of a port or a source address tries the next source; every local
// failure (see [health.LocalReason]) is counted and logged (see dialLog),
// and returned wrapping ErrLocalDial. It is safe for concurrent use.
type Dialer struct {
	pool    string
	dialers []net.Dialer
	next    atomic.Uint32
	// DialOne, when set, dials addr through one source's dialer in
	// place of the dialer itself: tests set it before the first dial to
	// inject errors (DialSocket then declines, so every dial comes here).
	DialOne func(d *net.Dialer, addr string) (net.Conn, error)
	// count counts one local failure in the metrics.
	count func(pool, node, reason string)
	log   *dialLog
}

// newDialer returns the dialer of the pool named pool, dialing from
// sources (none: the kernel's choice) within timeout, logging to log and
// counting local failures with count (nil: not counted).
func newDialer(pool string, sources []string, timeout time.Duration, log *slog.Logger, count func(pool, node, reason string)) (*Dialer, error) {
	d := &Dialer{
		pool:  pool,
		count: count,
		log:   &dialLog{log: log, pool: pool, nodes: map[string]*nodeDialLog{}},
	}
	for _, s := range sources {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("source address %q is not an IP", s)
		}
		d.dialers = append(d.dialers, net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: ip}, Control: sockopt.BindNoPort})
	}
	if len(d.dialers) == 0 {
		d.dialers = []net.Dialer{{Timeout: timeout}}
	}
	return d, nil
}

// holdTo makes every dial check the address it is about to connect to
// against p (see NodePolicy); nil p changes nothing. It is called before
// the first dial.
func (d *Dialer) holdTo(p *NodePolicy) {
	if p == nil {
		return
	}
	check := p.control
	for i := range d.dialers {
		nd := &d.dialers[i]
		if bind := nd.Control; bind != nil {
			nd.Control = func(network, address string, c syscall.RawConn) error {
				if err := check(network, address, c); err != nil {
					return err
				}
				return bind(network, address, c)
			}
			continue
		}
		nd.Control = check
	}
}

// Dial connects to the node at addr from the next source address, and
// from the ones after it while the dial fails for want of a port or a
// source address there. A shortage of descriptors or memory is the same
// from every source: it is not tried again.
func (d *Dialer) Dial(addr string) (net.Conn, error) {
	return fromSources(d, addr, func(nd *net.Dialer) (net.Conn, error) {
		if d.DialOne != nil {
			return d.DialOne(nd, addr)
		}
		return nd.Dial("tcp", addr)
	})
}

// fromSources runs dial, a dial to the node at addr through one source's
// net.Dialer, from the next source address and from the ones after it
// while it fails for want of a port or a source address there: Dial's
// and DialSocket's rotation. A local failure is counted and logged, and
// the last one wrapped in ErrLocalDial; any other is the node's, returned
// as it is.
func fromSources[C any](d *Dialer, addr string, dial func(nd *net.Dialer) (C, error)) (C, error) {
	i := 0
	if len(d.dialers) > 1 {
		i = int(d.next.Add(1) % uint32(len(d.dialers)))
	}
	for k := 0; ; k++ {
		c, err := dial(&d.dialers[(i+k)%len(d.dialers)])
		if err == nil {
			return c, nil
		}
		reason := health.LocalReason(err)
		if reason == "" {
			return c, err
		}
		if d.count != nil {
			d.count(d.pool, addr, reason)
		}
		d.log.failed(addr, reason, err)
		if !PerSource(reason) || k+1 >= len(d.dialers) {
			return c, fmt.Errorf("%w (%s): %w", ErrLocalDial, reason, err)
		}
	}
}

// PerSource reports whether a local dial failure of this reason belongs
// to one source address toward one node (no port, no such address), so
// that another source, or another node, may still be dialed; a shortage
// of descriptors or memory is the whole gateway's.
func PerSource(reason string) bool {
	return reason == health.ReasonNoSourcePort || reason == health.ReasonNoSourceAddr
}

// dialLog writes one pool's log lines about local dial failures: per node,
// at most one line per dialLogEvery with the number of failures since the
// line before and the reason and error of the last one (the metric splits
// them by reason); failures held back are written in one line once the
// interval has passed. It is safe for concurrent use.
type dialLog struct {
	log  *slog.Logger
	pool string

	mu    sync.Mutex
	nodes map[string]*nodeDialLog
}

// nodeDialLog is dialLog's state for one node.
type nodeDialLog struct {
	lines  throttle.Lines
	reason string // of the last failure
	err    error  // the last failure
	timer  *time.Timer
}

// failed notes one local failure of a dial to node.
func (l *dialLog) failed(node, reason string, err error) {
	l.mu.Lock()
	nl := l.nodes[node]
	if nl == nil {
		nl = &nodeDialLog{}
		l.nodes[node] = nl
	}
	nl.reason, nl.err = reason, err
	now := time.Now()
	n, ok := nl.lines.Note(now, dialLogEvery)
	if !ok && nl.timer == nil {
		nl.timer = time.AfterFunc(nl.lines.Wait(now, dialLogEvery), func() { l.flush(node) })
	}
	l.mu.Unlock()
	if ok { // written outside the lock: a slow log sink slows this dial only
		l.write(node, reason, err, n)
	}
}

// flush writes the failures held back for node, if any.
func (l *dialLog) flush(node string) {
	l.mu.Lock()
	nl := l.nodes[node]
	nl.timer = nil
	n := nl.lines.Pending()
	if n > 0 {
		n = nl.lines.Take(time.Now())
	}
	reason, err := nl.reason, nl.err
	l.mu.Unlock()
	if n > 0 {
		l.write(node, reason, err, n)
	}
}

// write logs n local failures of dials to node, the last for reason.
func (l *dialLog) write(node, reason string, err error, n int) {
	l.log.Error("upstream dial failed on the gateway's side; the node is not charged with it",
		"pool", l.pool, "node", node, "reason", reason, "err", err, "errors", n)
}
