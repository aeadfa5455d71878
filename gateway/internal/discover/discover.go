// Package discover is the gateway's side of node discovery: it runs a
// watcher (see internal/discovery) for every pool with [pools.discovery],
// keeps the nodes each found last, and hands them to the gateway, which
// swaps them into its running config through the path a reload takes.
// It never changes a pool itself: the gateway does, through [Gateway].
package discover

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/discovery"
)

// Gateway is the gateway a [Set] applies the nodes it finds to (the
// gateway package's discoveryTarget implements it).
//
// Locks: the gateway's reload lock comes first, the Set's own lock after
// it, never the other way round. ApplyDiscovered takes the reload lock
// and calls take under it; take takes the Set's lock, and so does
// [Set.Fill], which the gateway calls while it swaps, with the reload
// lock held.
type Gateway interface {
	// ApplyDiscovered takes the gateway's reload lock and, unless the
	// gateway is shutting down (then it does nothing), calls take with
	// the addresses the gateway listens on: its client, TLS and admin
	// listeners. If take returns true (it recorded a new set of found
	// nodes), the gateway builds its running config again, the nodes
	// found filled in by [Set.Fill], swaps it in and returns the swap's
	// error.
	ApplyDiscovered(take func(listening []netip.AddrPort) bool) error
}

// Options is what [New] needs.
type Options struct {
	// Gateway applies the nodes found.
	Gateway Gateway
	// Log receives the watchers' lines.
	Log *slog.Logger
	// Registerer, if set, registers the discovery metrics
	// (wsgate_discovery_*) once a first pool uses discovery.
	Registerer prometheus.Registerer
	// Keep returns the nodes of nodes that the node policy of spec takes
	// (nodes itself when it refuses none).
	Keep func(spec conf.Discovery, nodes []conf.Node) []conf.Node
	// Screen returns src with the nodes the node policy of spec refuses
	// left out of its answers, saying so to log.
	Screen func(spec conf.Discovery, src discovery.Source, log *slog.Logger) discovery.Source
}

// Set runs the [pools.discovery] watchers and keeps, per pool, the
// nodes found last. The nodes enter the running config through the
// gateway's swap, the path a reload takes: a node found is added pending
// and health-checked before it takes clients, a node gone is retired and
// its tunnels told 1001 over the drain window. Its methods are safe for
// concurrent use.
type Set struct {
	gw     Gateway
	log    *slog.Logger
	reg    prometheus.Registerer
	keep   func(conf.Discovery, []conf.Node) []conf.Node
	screen func(conf.Discovery, discovery.Source, *slog.Logger) discovery.Source

	mu      sync.Mutex
	found   map[string][]conf.Node // by pool: the last set applied
	running map[string]*watch      // by pool

	once    sync.Once
	nodes   *prometheus.GaugeVec   // wsgate_discovery_nodes
	lookups *prometheus.CounterVec // wsgate_discovery_lookups_total
}

// New returns a Set that runs no watcher yet: see [Set.Sync].
func New(o Options) *Set {
	return &Set{gw: o.Gateway, log: o.Log, reg: o.Registerer, keep: o.Keep, screen: o.Screen}
}

// watch is one pool's running watcher and the section it was started for.
type watch struct {
	spec conf.Discovery
	w    *discovery.Watcher
}

// Fill returns cfg with the nodes found last as the nodes of each pool
// that has discovery; cfg itself when no pool has discovery. The copy
// shares everything else. A pool nothing was found for yet keeps the
// nodes it has in old, the config in force (a reload that turns
// discovery on drains nothing before the first answer), or has none.
func (s *Set) Fill(cfg, old *conf.Config) *conf.Config {
	if !slices.ContainsFunc(cfg.Pools, func(p conf.Pool) bool { return p.Discovery.Kind != "" }) {
		return cfg
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.found == nil {
		s.found = map[string][]conf.Node{}
	}
	c := *cfg
	c.Pools = slices.Clone(cfg.Pools)
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Discovery.Kind == "" {
			continue
		}
		if _, ok := s.found[p.Name]; !ok {
			if nodes, ok := poolNodes(old, p.Name); ok {
				s.found[p.Name] = slices.Clone(nodes)
			}
		}
		// Nodes found under an earlier allow, or listed before a reload
		// turned discovery on, are held to this section's policy: a
		// reload that narrows allow drains the nodes it leaves out at
		// once, the last one up included.
		if found, ok := s.found[p.Name]; ok {
			s.found[p.Name] = s.keep(p.Discovery, found)
		}
		p.Nodes = make([]conf.Node, len(s.found[p.Name]))
		for j, n := range s.found[p.Name] {
			p.Nodes[j] = conf.Node{Addr: n.Addr, Weight: n.Weight, MaxConns: p.MaxConnsPerNode}
		}
	}
	return &c
}

// poolNodes returns the nodes of the pool of cfg named name, and whether
// cfg (which may be nil) has that pool.
func poolNodes(cfg *conf.Config, name string) ([]conf.Node, bool) {
	if cfg == nil {
		return nil, false
	}
	for i := range cfg.Pools {
		if cfg.Pools[i].Name == name {
			return cfg.Pools[i].Nodes, true
		}
	}
	return nil, false
}

// initMetrics registers the discovery metrics once, when a first pool
// uses discovery.
func (s *Set) initMetrics() {
	s.once.Do(func() {
		s.nodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wsgate_discovery_nodes",
			Help: "Nodes found by a pool's last successful discovery lookup.",
		}, []string{"pool"})
		s.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsgate_discovery_lookups_total",
			Help: "Discovery lookups by pool and result: ok, error (the lookup failed), empty (it answered with no node). Error and empty keep the nodes found last.",
		}, []string{"pool", "result"})
		if s.reg != nil {
			s.reg.MustRegister(s.nodes, s.lookups)
		}
	})
}

// Sync starts a watcher for each pool of cfg, the running config, that
// has discovery, restarts those whose section changed, and stops those
// of pools that no longer have it. A restarted pool keeps its nodes until
// the new source answers.
func (s *Set) Sync(cfg *conf.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]conf.Discovery{}
	for _, p := range cfg.Pools {
		if p.Discovery.Kind != "" {
			want[p.Name] = p.Discovery
		}
	}
	for name, w := range s.running {
		if spec, ok := want[name]; !ok || !spec.Same(w.spec) {
			w.w.Stop()
			delete(s.running, name)
		}
		if _, ok := want[name]; !ok {
			delete(s.found, name)
			if s.nodes != nil {
				s.nodes.DeleteLabelValues(name)
				s.lookups.DeletePartialMatch(prometheus.Labels{"pool": name})
			}
		}
	}
	if len(want) == 0 {
		return
	}
	s.initMetrics()
	if s.running == nil {
		s.running = map[string]*watch{}
	}
	if s.found == nil {
		s.found = map[string][]conf.Node{}
	}
	for name, spec := range want {
		if s.running[name] != nil {
			continue
		}
		w, err := s.startWatch(name, spec)
		if err != nil { // validated: a URL go-redis still refuses
			s.log.Error("discovery not started", "pool", name, "err", err)
			continue
		}
		s.running[name] = w
	}
}

// dnsMisses is how many DNS answers in a row must leave a node out before
// it leaves the pool: servers that rotate or cap their records would
// otherwise drain a node's tunnels at every other lookup.
const dnsMisses = 3

// startWatch starts the watcher of pool name.
func (s *Set) startWatch(name string, spec conf.Discovery) (*watch, error) {
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
	src = s.screen(spec, src, log)
	wt := &watch{spec: spec}
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
			s.lookups.WithLabelValues(name, result).Inc()
			if result == discovery.ResultOK {
				s.nodes.WithLabelValues(name).Set(float64(n))
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

// discovered makes nodes the pool's nodes, through the gateway's swap:
// the nodes it did not have are added and health-checked, the ones it
// loses are drained. A set from a watcher that is no longer the pool's
// (stopped, or replaced by a reload) is dropped.
func (s *Set) discovered(pool string, wt *watch, nodes []discovery.Node, log *slog.Logger) error {
	var addrs []string
	applied := false
	// take runs with the gateway's reload lock held; s.mu after it.
	take := func(own []netip.AddrPort) bool {
		set := make([]conf.Node, 0, len(nodes))
		addrs = make([]string, 0, len(nodes))
		var loops []string
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
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		applied = s.running[pool] == wt
		if applied {
			s.found[pool] = set
		}
		return applied
	}
	if err := s.gw.ApplyDiscovered(take); err != nil {
		return err
	}
	if applied {
		log.Info("discovered nodes applied", "nodes", addrs)
	}
	return nil
}

// Stop stops every watcher; it does not wait for them.
func (s *Set) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, w := range s.running {
		w.w.Stop()
		delete(s.running, name)
	}
}
