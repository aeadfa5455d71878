package gateway

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/internal/discovery"
)

// discoveries runs the [pools.discovery] watchers and keeps, per pool, the
// nodes found last. The nodes enter the running config through swap, the
// path a reload takes: a node found is added pending and health-checked
// before it takes clients, a node gone is retired and its tunnels told
// 1001 over the drain window. Its methods are safe for concurrent use.
type discoveries struct {
	mu      sync.Mutex
	found   map[string][]conf.Node // by pool: the last set applied
	running map[string]*watch      // by pool

	once    sync.Once
	nodes   *prometheus.GaugeVec   // wsgate_discovery_nodes
	lookups *prometheus.CounterVec // wsgate_discovery_lookups_total
}

// watch is one pool's running watcher and the section it was started for.
type watch struct {
	spec conf.Discovery
	w    *discovery.Watcher
}

// fill returns cfg with the nodes found last as the nodes of each pool
// that has discovery; cfg itself when no pool has discovery. The copy
// shares everything else. A pool nothing was found for yet keeps the
// nodes it has in old (a reload that turns discovery on drains nothing
// before the first answer), or has none.
func (d *discoveries) fill(cfg *conf.Config, old *generation) *conf.Config {
	if !slices.ContainsFunc(cfg.Pools, func(p conf.Pool) bool { return p.Discovery.Kind != "" }) {
		return cfg
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.found == nil {
		d.found = map[string][]conf.Node{}
	}
	c := *cfg
	c.Pools = slices.Clone(cfg.Pools)
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Discovery.Kind == "" {
			continue
		}
		if _, ok := d.found[p.Name]; !ok && old != nil && old.pools[p.Name] != nil {
			d.found[p.Name] = slices.Clone(old.pools[p.Name].Conf.Nodes)
		}
		// Nodes found under an earlier allow, or listed before a reload
		// turned discovery on, are held to this section's policy: a
		// reload that narrows allow drains the nodes it leaves out at
		// once, the last one up included.
		if found, ok := d.found[p.Name]; ok {
			d.found[p.Name] = upstream.NewNodePolicy(p.Discovery).Keep(found)
		}
		p.Nodes = make([]conf.Node, len(d.found[p.Name]))
		for j, n := range d.found[p.Name] {
			p.Nodes[j] = conf.Node{Addr: n.Addr, Weight: n.Weight, MaxConns: p.MaxConnsPerNode}
		}
	}
	return &c
}

// initMetrics registers the discovery metrics once, when a first pool
// uses discovery.
func (d *discoveries) initMetrics(reg *prometheus.Registry) {
	d.once.Do(func() {
		d.nodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wsgate_discovery_nodes",
			Help: "Nodes found by a pool's last successful discovery lookup.",
		}, []string{"pool"})
		d.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_discovery_lookups_total",
			Help: "Discovery lookups by pool and result: ok, error (the lookup failed), empty (it answered with no node). Error and empty keep the nodes found last.",
		}, []string{"pool", "result"})
		reg.MustRegister(d.nodes, d.lookups)
	})
}

// syncDiscovery starts a watcher for each pool of the running config that
// has discovery, restarts those whose section changed, and stops those of
// pools that no longer have it. A restarted pool keeps its nodes until
// the new source answers.
func (s *Server) syncDiscovery() {
	d := &s.disc
	cfg := s.current().cfg
	d.mu.Lock()
	defer d.mu.Unlock()
	want := map[string]conf.Discovery{}
	for _, p := range cfg.Pools {
		if p.Discovery.Kind != "" {
			want[p.Name] = p.Discovery
		}
	}
	for name, w := range d.running {
		if spec, ok := want[name]; !ok || !spec.Same(w.spec) {
			w.w.Stop()
			delete(d.running, name)
		}
		if _, ok := want[name]; !ok {
			delete(d.found, name)
			if d.nodes != nil {
				d.nodes.DeleteLabelValues(name)
				d.lookups.DeletePartialMatch(prometheus.Labels{"pool": name})
			}
		}
	}
	if len(want) == 0 {
		return
	}
	d.initMetrics(s.metrics.Reg)
	if d.running == nil {
		d.running = map[string]*watch{}
	}
	if d.found == nil {
		d.found = map[string][]conf.Node{}
	}
	for name, spec := range want {
		if d.running[name] != nil {
			continue
		}
		w, err := s.startWatch(name, spec)
		if err != nil { // validated: a URL go-redis still refuses
			s.log.Error("discovery not started", "pool", name, "err", err)
			continue
		}
		d.running[name] = w
	}
}

// dnsMisses is how many DNS answers in a row must leave a node out before
// it leaves the pool: servers that rotate or cap their records would
// otherwise drain a node's tunnels at every other lookup.
const dnsMisses = 3

// startWatch starts the watcher of pool name.
func (s *Server) startWatch(name string, spec conf.Discovery) (*watch, error) {
	var (
		src   discovery.Source
		close func() error
	)
	switch spec.Kind {
	case "dns":
		src = discovery.NewDNS(spec.Name, spec.Port, spec.Resolver)
	case "redis":
		r, err := discovery.NewRedis(spec.Redis, spec.Name)
		if err != nil {
			return nil, err
		}
		src, close = r, r.Close
	default:
		return nil, fmt.Errorf("unknown discovery kind %q", spec.Kind)
	}
	log := s.log.With("pool", name, "discovery", spec.Kind, "name", spec.Name)
	src = upstream.NewPolicySource(src, upstream.NewNodePolicy(spec), log)
	wt := &watch{spec: spec}
	d := &s.disc
	misses := 1 // a Redis key's lifetime already outlasts a missed refresh
	if spec.Kind == "dns" {
		misses = dnsMisses
	}
	wt.w = discovery.Watch(src, discovery.Options{
		Interval: spec.Interval.Duration,
		Misses:   misses,
		Log:      log,
		Apply:    func(nodes []discovery.Node) error { return s.discovered(name, wt, nodes, log) },
		Observe: func(result string, n int) {
			d.lookups.WithLabelValues(name, result).Inc()
			if result == discovery.ResultOK {
				d.nodes.WithLabelValues(name).Set(float64(n))
			}
		},
	})
	if close != nil {
		go func() {
			<-wt.w.Done()
			_ = close()
		}()
	}
	log.Info("discovery started", "interval", spec.Interval.Duration)
	return wt, nil
}

// discovered makes nodes the pool's nodes, through swap: the nodes it did
// not have are added and health-checked, the ones it loses are drained.
// A set from a watcher that is no longer the pool's (stopped, or replaced
// by a reload) is dropped.
func (s *Server) discovered(pool string, wt *watch, nodes []discovery.Node, log *slog.Logger) error {
	s.reload.mu.Lock() // before disc.mu, as in apply
	defer s.reload.mu.Unlock()
	if s.draining.Load() {
		return nil
	}
	set := make([]conf.Node, 0, len(nodes))
	addrs := make([]string, 0, len(nodes))
	var loops []string
	own := s.ownAddrs()
	for _, n := range nodes {
		if reachesOwn(n.Addr, own, localIPs) {
			loops = append(loops, n.Addr)
			continue
		}
		set = append(set, conf.Node{Addr: n.Addr, Weight: n.Weight})
		addrs = append(addrs, n.Addr)
	}
	if len(loops) > 0 {
		log.Warn("discovered nodes left out: they are this gateway's own listeners, and would loop clients through it", "nodes", loops)
	}
	if len(set) == 0 { // as an empty answer: discovery never empties a pool
		return nil
	}
	s.disc.mu.Lock()
	current := s.disc.running[pool] == wt
	if current {
		s.disc.found[pool] = set
	}
	s.disc.mu.Unlock()
	if !current {
		return nil
	}
	if _, err := s.swap(s.current().cfg, byDiscovery, nil); err != nil {
		return err
	}
	log.Info("discovered nodes applied", "nodes", addrs)
	return nil
}

// stopDiscovery stops every watcher; it does not wait for them.
func (s *Server) stopDiscovery() {
	d := &s.disc
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, w := range d.running {
		w.w.Stop()
		delete(d.running, name)
	}
}

// ownAddrs returns the addresses this gateway listens on: its client,
// TLS and admin listeners. The caller holds reload.mu.
func (s *Server) ownAddrs() []netip.AddrPort {
	var out []netip.AddrPort
	add := func(ln net.Listener) {
		if ln == nil {
			return
		}
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	for _, ln := range s.listeners {
		add(ln)
	}
	add(s.tlsLn)
	add(s.adminLn)
	return out
}

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
