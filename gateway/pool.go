package gateway

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
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/sockopt"
)

// pool is a [[pools]] entry at run time: the balancer's view of its nodes,
// how to dial them, and an HTTP client per node for plain requests.
type pool struct {
	name           string
	balance        string
	bal            *balancer.Pool
	health         *health.Checker
	connectTimeout time.Duration
	tries          int
	dial           *dialer
	http           map[*balancer.Node]*fasthttp.HostClient
	key            hashKey       // a hash pool's hash_key; none for the others
	conf           *conf.Pool    // the config it was built from
	healthConf     health.Config // its checker's settings
	// sendProxy is send_proxy_v2: node connections start with a PROXY
	// header, and plain requests take a connection of their own.
	sendProxy bool
	// admit is [pools.admission], shared with the pool of the same name
	// in later generations so a reload keeps its tokens; a reload sets
	// its rate when it commits.
	admit *rateLimit
}

// newPool builds the run-time pool for pc. Its nodes come from reg by pool
// name and address, so a node kept, or dropped by an earlier reload and
// named again while tunnels to it are open, is the same node with its
// live count and tunnels. With old (the pool of the same name in the
// running generation) it reuses old's checker, so kept nodes keep their
// health; the nodes old did not have are returned in added, old's nodes
// pc drops in removed. It changes nothing that is in use: commit does,
// once the whole new generation is built (a node it registers anew is
// used by nobody yet). Its dialer calls count for each dial that fails on
// the gateway's side.
func newPool(pc *conf.Pool, old *pool, reg *balancer.Registry, log *slog.Logger, count func(pool, node, reason string)) (p *pool, added, removed []*balancer.Node, err error) {
	picker, err := balancer.NewPicker(pc.Balance)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	var key hashKey
	if pc.Balance == balancer.PolicyHash {
		picker, key = balancer.NewHash(pc.HashBalanceFactor), parseHashKey(pc.HashKey)
	}
	d, err := newDialer(pc.Name, pc.SourceAddrs, pc.ConnectTimeout.Duration, log, count)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	d.holdTo(newNodePolicy(pc.Discovery))
	p = &pool{
		name:           pc.Name,
		balance:        pc.Balance,
		key:            key,
		connectTimeout: pc.ConnectTimeout.Duration,
		tries:          pc.ConnectTries,
		dial:           d,
		http:           make(map[*balancer.Node]*fasthttp.HostClient, len(pc.Nodes)),
		conf:           pc,
		healthConf:     healthConfig(pc),
		sendProxy:      pc.SendProxyV2,
	}
	keep := map[string]*balancer.Node{}
	if old != nil {
		p.admit = old.admit
	} else {
		p.admit = &rateLimit{}
		p.admit.set(pc.Admission.Rate, pc.Admission.Burst)
	}
	if old != nil {
		p.health = old.health
		for _, n := range old.bal.Nodes() {
			keep[n.Addr()] = n
		}
	} else {
		p.health = health.NewChecker(p.healthConf, log.With("pool", pc.Name))
	}
	nodes := make([]*balancer.Node, 0, len(pc.Nodes))
	for _, nc := range pc.Nodes {
		n, _ := reg.Node(pc.Name, nc.Addr, nc.Weight, nc.MaxConns)
		if keep[nc.Addr] == nil {
			added = append(added, n)
		}
		delete(keep, nc.Addr)
		nodes = append(nodes, n)
		p.http[n] = &fasthttp.HostClient{
			Addr:                          nc.Addr,
			Dial:                          func(addr string) (net.Conn, error) { return d.dial(addr) },
			ReadTimeout:                   30 * time.Second,
			WriteTimeout:                  30 * time.Second,
			MaxIdleConnDuration:           30 * time.Second,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true, // prepareForward sets the target
			NoDefaultUserAgentHeader:      true,
		}
	}
	for _, n := range keep {
		removed = append(removed, n)
	}
	p.bal = balancer.NewPool(pc.Name, picker, nodes)
	return p, added, removed, nil
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
		Refuse:     newNodePolicy(pc.Discovery).addrCheck(),
	}
}

// doOwnConn sends req to the node at addr on a connection of its own that
// starts with head (a PROXY header), reads the answer into resp and closes
// the connection, all within timeout: a send_proxy_v2 pool's plain
// request, which cannot share a pooled connection whose header names
// another client.
func (p *pool) doOwnConn(addr string, head []byte, req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	conn, err := p.dial.dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	bw := bufio.NewWriter(conn)
	_, _ = bw.Write(head)
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

// applyNodeSettings gives every node the weight and cap pc sets for it;
// they apply from the next pick and never evict.
func (p *pool) applyNodeSettings() {
	for _, nc := range p.conf.Nodes {
		if n := p.node(nc.Addr); n != nil {
			n.SetWeight(nc.Weight)
			n.SetMaxConns(nc.MaxConns)
		}
	}
}

// startHealth begins probing every node, reporting to obs.
func (p *pool) startHealth(obs health.Observer) {
	p.health.SetObserver(obs)
	for _, n := range p.bal.Nodes() {
		p.health.Add(nodeTarget{n})
	}
}

// closeIdle closes the pool's idle HTTP connections to its nodes.
func (p *pool) closeIdle() {
	for _, hc := range p.http {
		hc.CloseIdleConnections()
	}
}

// close stops the pool's probes and idle HTTP connections.
func (p *pool) close() {
	p.health.Stop()
	p.closeIdle()
}

// drain and undrain go through the health checker, which owns node states.
func (p *pool) drain(n *balancer.Node) { _ = p.health.Drain(n.Addr()) }

func (p *pool) undrain(n *balancer.Node) { _ = p.health.Undrain(n.Addr()) }

// checkView is the node's last health check for the admin API.
func (p *pool) checkView(addr string) *checkJSON {
	st, ok := p.health.Status(addr)
	if !ok {
		return nil
	}
	c := &checkJSON{
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

// nodeTarget lets the health checker steer a balancer node; the two
// packages do not know each other.
type nodeTarget struct{ *balancer.Node }

// SetState maps the checker's state onto the balancer's.
func (t nodeTarget) SetState(s health.State) { t.Node.SetState(balancerState(s)) }

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

// errLocalDial marks a dial that failed on the gateway's side: no port or
// source address, descriptor or kernel memory to dial from. It says
// nothing about the node, so the node is not charged with it.
var errLocalDial = errors.New("dial failed for a local reason")

// dialer opens connections to nodes, rotating over the pool's source
// addresses. Each socket bound to a source address is marked
// IP_BIND_ADDRESS_NO_PORT, so its port is picked at connect against the
// whole (source, node) pair rather than at bind against the source alone:
// one source address then reaches every node ip:port up to the ephemeral
// range each, instead of all nodes together. A dial that fails for want
// of a port or a source address tries the next source; every local
// failure (see [health.LocalReason]) is counted and logged (see dialLog),
// and returned wrapping errLocalDial. It is safe for concurrent use.
type dialer struct {
	pool    string
	dialers []net.Dialer
	next    atomic.Uint32
	// dialOne dials addr through one source's dialer; tests replace it
	// before the first dial to inject errors.
	dialOne func(d *net.Dialer, addr string) (net.Conn, error)
	// count counts one local failure in the metrics.
	count func(pool, node, reason string)
	log   *dialLog
}

func newDialer(pool string, sources []string, timeout time.Duration, log *slog.Logger, count func(pool, node, reason string)) (*dialer, error) {
	d := &dialer{
		pool:    pool,
		dialOne: func(nd *net.Dialer, addr string) (net.Conn, error) { return nd.Dial("tcp", addr) },
		count:   count,
		log:     &dialLog{log: log, pool: pool, nodes: map[string]*nodeDialLog{}},
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
// against p (see nodePolicy); nil p changes nothing. It is called before
// the first dial.
func (d *dialer) holdTo(p *nodePolicy) {
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

// dial connects to the node at addr from the next source address, and
// from the ones after it while the dial fails for want of a port or a
// source address there. A shortage of descriptors or memory is the same
// from every source: it is not tried again.
func (d *dialer) dial(addr string) (net.Conn, error) {
	i := 0
	if len(d.dialers) > 1 {
		i = int(d.next.Add(1) % uint32(len(d.dialers)))
	}
	for k := 0; ; k++ {
		nd := &d.dialers[(i+k)%len(d.dialers)]
		c, err := d.dialOne(nd, addr)
		if err == nil {
			return c, nil
		}
		reason := health.LocalReason(err)
		if reason == "" {
			return nil, err
		}
		if d.count != nil {
			d.count(d.pool, addr, reason)
		}
		d.log.failed(addr, reason, err)
		if !perSource(reason) || k+1 >= len(d.dialers) {
			return nil, fmt.Errorf("%w (%s): %w", errLocalDial, reason, err)
		}
	}
}

// perSource reports whether a local dial failure of this reason belongs
// to one source address toward one node (no port, no such address), so
// that another source, or another node, may still be dialed; a shortage
// of descriptors or memory is the whole gateway's.
func perSource(reason string) bool {
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
	lines  telemetry.Throttle
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
