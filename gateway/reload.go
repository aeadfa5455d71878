package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
)

// reloadState serializes reloads and remembers how the last one went.
//
// A reload has two locks. serial is held for the whole of it, so reloads
// run one at a time; it covers the slow part, done before mu: reading the
// file and starting the auth plugins it lists (up to their start
// timeout). mu is held only to build and commit the generation, the part
// every other changer of the running config (discovery, the TLS watcher,
// the node sweep) and the admin API's reads wait for.
type reloadState struct {
	serial sync.Mutex
	mu     sync.Mutex
	last   ReloadStatus
	// gone are the nodes the last swap removed, at goneAt: a sweep keeps
	// them for a handshake timeout (see forgetNodes). Under mu.
	gone   []leaving
	goneAt time.Time
	// sweepQueued is set while a sweep is queued (see requestSweep).
	sweepQueued atomic.Bool
}

// The values of ReloadStatus.Result.
const (
	ReloadNone  = "none"  // no reload since start: the config loaded at start is in force
	ReloadOK    = "ok"    // the last reload was swapped in
	ReloadError = "error" // the last reload was refused; the config before it stays
)

// ReloadStatus is how the last reload went, as the admin API shows it.
// Before the first reload it is only {"result": "none", "generation": N}
// (see MarshalJSON), which reads as what it is rather than as a failure.
type ReloadStatus struct {
	Result     string    `json:"result"` // ReloadNone, ReloadOK or ReloadError
	At         time.Time `json:"at"`
	OK         bool      `json:"ok"`
	Error      string    `json:"error,omitempty"`
	Generation uint64    `json:"generation"`
	TookMS     float64   `json:"took_ms"`
	// Trigger is what asked for it: ReloadSignal, ReloadFile or ReloadAPI.
	Trigger string `json:"trigger"`
	// Changes are the keys the reload changed (see configChanges): empty
	// when the file said what the running config said; null on an error.
	Changes []string `json:"changes"`
	Restart []string `json:"needs_restart,omitempty"` // changes that apply only after a restart
}

// MarshalJSON writes the status; with Result "none" only the result, the
// generation and a sentence saying no reload has happened, without the
// zero time and the false "ok" that read as a failed reload.
func (st ReloadStatus) MarshalJSON() ([]byte, error) {
	type plain ReloadStatus // without this method
	var v any = plain(st)
	if st.Result == ReloadNone {
		v = struct {
			Result     string `json:"result"`
			Generation uint64 `json:"generation"`
			Message    string `json:"message"`
		}{st.Result, st.Generation, "no reload since the gateway started; the config it started with is in force"}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // errors quote config values such as ">= 0"
	err := enc.Encode(v)
	return b.Bytes(), err
}

// leaving is a node a reload removed, with the pool it was in.
type leaving struct {
	p *upstream.Pool
	n *balancer.Node
}

// Reload reads the config file again and, if it is valid, swaps it in: nodes
// are matched by address and keep their live counts, health and tunnels; a
// changed weight or cap applies to the next pick; a removed node takes no
// new connection and its tunnels are closed with 1001 spread over the drain
// window; an added node takes traffic after rise passing probes (a node
// named again while tunnels from its removal are still open is the same
// node: its live count still counts against its cap); routes,
// origins and limits apply to the next handshake. Any error leaves the
// running config untouched and is returned (naming file, line and key).
// Its log line says the trigger is ReloadAPI; see ReloadBy.
func (s *Server) Reload() error { return s.ReloadBy(ReloadAPI) }

// ReloadBy is Reload asked for by trigger (ReloadSignal, ReloadFile,
// ReloadAPI), which its log line names with what changed. A reload runs
// whatever the file says, an unchanged file too: it also reads the TLS
// files again, which is what a SIGHUP after renewing a certificate asks
// for. The log line of one that changed nothing says so (changes=none),
// as the second of an edit followed by SIGHUP does.
func (s *Server) ReloadBy(trigger string) error {
	return s.reloadFrom(s.current().cfg.File, trigger)
}

// ReloadFrom is Reload from the file at path.
func (s *Server) ReloadFrom(path string) error { return s.reloadFrom(path, ReloadAPI) }

func (s *Server) reloadFrom(path, trigger string) error {
	start := time.Now()
	s.reload.serial.Lock()
	defer s.reload.serial.Unlock()
	cfg, err := conf.Load(path)
	var prep *prepared
	if err == nil {
		prep, err = s.prepare(cfg)
	}
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	if err != nil {
		s.recordReload(err, trigger, nil, nil, start)
		return err
	}
	return s.apply(cfg, prep, trigger, start)
}

// Apply swaps in a loaded config as Reload does.
func (s *Server) Apply(cfg *conf.Config) error {
	start := time.Now()
	s.reload.serial.Lock()
	defer s.reload.serial.Unlock()
	prep, err := s.prepare(cfg)
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	if err != nil {
		s.recordReload(err, ReloadAPI, nil, nil, start)
		return err
	}
	return s.apply(cfg, prep, ReloadAPI, start)
}

// prepared is what a reload reads and starts before it takes reload.mu:
// the slow part, done with reload.serial held. swap commits it with the
// generation, or discards it.
type prepared struct {
	tls     *edge.CertSet                // cfg's TLS files, read (nil without a TLS listener)
	nodeTLS map[string]*upstream.NodeTLS // cfg's [pools.tls] files, read, by pool name
	plugins *pluginhost.Staged           // cfg's auth plugins, started (nil without a plugin host)
}

// prepare reads cfg's TLS files (the listener's and the pools') and
// starts the auth plugins of cfg that do not run as listed, without
// putting either in force (see edge.Certificates.Load, upstream.LoadTLS,
// pluginhost.Host.Stage). A TLS file that cannot be used is reported
// before any plugin starts.
func (s *Server) prepare(cfg *conf.Config) (*prepared, error) {
	if err := s.checkACMEReload(cfg); err != nil {
		return nil, err
	}
	set, err := s.tls.Load(cfg)
	if err != nil {
		return nil, err
	}
	prep := &prepared{tls: set}
	if prep.nodeTLS, err = upstream.LoadTLS(cfg); err != nil {
		return nil, err
	}
	if s.plugins != nil {
		if prep.plugins, err = s.plugins.Stage(cfg.Plugins); err != nil {
			return nil, fmt.Errorf("auth plugins: %w", err)
		}
	}
	return prep, nil
}

// apply is Apply with reload.mu held; prep is cfg's, prepared.
func (s *Server) apply(cfg *conf.Config, prep *prepared, trigger string, start time.Time) error {
	old := s.current().cfg
	restart, err := s.swap(cfg, byReload, prep)
	if err != nil {
		s.recordReload(err, trigger, nil, nil, start)
		return err
	}
	s.disc.Sync(s.current().cfg)
	for _, r := range restart {
		s.log.Warn("config change needs a restart to apply", "change", r)
	}
	changes := configChanges(old, s.current().cfg)
	s.recordReload(nil, trigger, changes, restart, start)
	attrs := []any{"trigger", trigger, "file", cfg.File, "generation", s.current().n, "took", time.Since(start), "changes", changesAttr(changes)}
	if len(restart) > 0 {
		attrs = append(attrs, "needs_restart", restart)
	}
	s.log.Info("config reloaded", attrs...)
	return nil
}

// What made swap change the running config.
const (
	byReload    = "reload"    // a config reload: a new generation
	byDiscovery = "discovery" // a pool's discovered nodes changed
)

// swap builds the generation for cfg, its discovered nodes filled in (see
// discover.Set.Fill), and swaps it in, with reload.mu held: the one path by
// which nodes enter and leave pools, whether a reload or discovery (by)
// changed them. prep is what a reload read and started for cfg (nil for
// discovery, which changes neither TLS files nor plugins): committed with
// the generation, or its plugins discarded on an error. It returns the
// changes that need a restart.
func (s *Server) swap(cfg *conf.Config, by string, prep *prepared) (restart []string, err error) {
	old := s.current()
	var staged *pluginhost.Staged
	certs, nodeTLS := old.tls, old.nodeTLS
	if prep != nil {
		staged, certs, nodeTLS = prep.plugins, prep.tls, prep.nodeTLS
	}
	if staged != nil {
		defer func() {
			if err != nil {
				staged.Discard() // nothing after a successful Commit
			}
		}()
	}
	if s.draining.Load() {
		return nil, fmt.Errorf("gateway is shutting down: %s refused", by)
	}
	cfg = s.disc.Fill(cfg, old.cfg)
	g, gone, err := s.build(cfg, old, certs, nodeTLS)
	if err != nil {
		return nil, err
	}
	g.n = old.n
	if by == byReload {
		g.n++
	}
	restart = needsRestart(old.cfg, cfg)
	// Plugins first: their reload is all or nothing, and a failure must
	// leave everything as it was. They were started before reload.mu was
	// taken; committing them takes no time.
	if staged != nil {
		if err := staged.Commit(); err != nil {
			return nil, fmt.Errorf("auth plugins: %w", err)
		}
	}

	// Commit: nothing above touched what is running.
	// A node coming (back) into a pool may be one an earlier reload
	// removed while tunnels to it stayed open: it gets its new settings
	// and is no longer leaving, so its new tunnels stay.
	for _, p := range g.pools {
		p.ApplyNodeSettings()
		p.Admit.Set(p.Conf.Admission.Rate, p.Conf.Admission.Burst)
		if op := old.pools[p.Name]; op != nil {
			if p.HealthConf != op.HealthConf {
				p.Health.SetConfig(p.HealthConf)
			}
			for _, n := range p.Balancer.Nodes() {
				if op.Node(n.Addr()) == nil {
					s.tunnels.Unretire(n)
					p.Health.AddPending(upstream.NodeTarget{Node: n})
				}
			}
		} else {
			p.Health.SetObserver(s.metrics.ProbeObserver(p.Name))
			for _, n := range p.Balancer.Nodes() {
				s.tunnels.Unretire(n)
				p.Health.AddPending(upstream.NodeTarget{Node: n})
			}
		}
	}
	s.limits.Set(cfg.Gateway.MaxConns, cfg.Gateway.MaxConnsPerIP)
	s.ipRate.Set(cfg.Gateway.HandshakeRatePerIP, cfg.Gateway.HandshakeBurstPerIP)
	s.floods.set(cfg)
	s.gen.Store(g)
	if s.h2 != nil {
		// For the client HTTP/2 connections served from now on, as new
		// tunnels take it from g.
		s.h2.SetWriteTimeout(cfg.Gateway.WriteTimeout.Duration)
	}
	s.shared.Sync(g.cfg) // starts and stops sharers; no Redis I/O here
	if prep != nil && (g.tls != nil || s.tlsLn == nil) {
		// The next TLS handshakes; tunnels keep theirs. A reading of the
		// same files by the watcher that began after this one's stays.
		s.tls.Offer(g.tls)
		// A file may have changed after this reload read it, and the
		// watcher's reading of it was dropped (it read for the config
		// this one replaces) or went in before this one: read the
		// files in force again.
		if s.tls.LoadBegunAfter(g.tls) {
			go s.reloadTLSFiles()
		}
	}
	// Else the file drops the TLS listener, which needs a restart: until
	// then it keeps serving the certificates it has.
	// Nodes removed by earlier reloads whose tunnels have all ended.
	s.tunnels.PruneRetired(g.holds)
	s.forgetNodes(g, gone)
	s.reload.gone, s.reload.goneAt = gone, time.Now()

	// Retire what left: no new connections, then their tunnels go away.
	window := cfg.Gateway.DrainWindow.Duration
	for _, l := range gone {
		l.p.Health.Remove(l.n.Addr())
		l.n.SetState(balancer.StateDrained)
		ts := s.tunnels.Retire(l.n)
		s.log.Info("node removed", "by", by, "pool", l.p.Name, "node", l.n.Addr(), "tunnels", len(ts), "window", window)
		go registry.Spread(context.Background(), ts, window, "node removed")
	}
	if len(gone) > 0 {
		// Those with no tunnel are forgotten once no handshake that read
		// the previous generation can still take a lease on them; the
		// others when their last tunnel ends (Tunnels.OnIdle).
		time.AfterFunc(g.handshakeTimeout, s.requestSweep)
	}
	for name, op := range old.pools {
		if g.pools[name] == nil {
			op.Close()
			s.metrics.ForgetPool(name)
		} else {
			op.CloseIdle()
			op.RetireH2(g.pools[name])
		}
	}
	return restart, nil
}

// forgetNodes drops from the node registry the nodes that are in none of
// g's pools and hold no lease, so an address named again later starts
// afresh, and drops their metric series. The nodes this reload removes
// (gone) stay until a later sweep: a handshake that read the previous
// generation may still take a lease on one before it is marked drained.
func (s *Server) forgetNodes(g *generation, gone []leaving) {
	keep := make(map[*balancer.Node]bool)
	for _, p := range g.pools {
		for _, n := range p.Balancer.Nodes() {
			keep[n] = true
		}
	}
	for _, l := range gone {
		keep[l.n] = true
	}
	for _, n := range g.nodes.ForgetNodes(func(n *balancer.Node) bool { return keep[n] }) {
		s.metrics.ForgetNode(n.Pool, n.Addr)
	}
}

// requestSweep queues a sweepNodes unless one is queued already; it does
// not wait for it.
func (s *Server) requestSweep() {
	if s.reload.sweepQueued.CompareAndSwap(false, true) {
		go s.sweepNodes()
	}
}

// sweepNodes forgets the nodes that have left the config for good: their
// last tunnel has ended and no handshake can take a lease on them any
// more. Without it a removed node, and its series, would stay until the
// next reload or discovery change.
func (s *Server) sweepNodes() {
	s.reload.sweepQueued.Store(false)
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	g := s.current()
	if g == nil {
		return
	}
	var gone []leaving
	if time.Since(s.reload.goneAt) < g.handshakeTimeout {
		gone = s.reload.gone
	}
	s.tunnels.PruneRetired(g.holds)
	s.forgetNodes(g, gone)
}

// holds reports whether n is a node of one of g's pools.
func (g *generation) holds(n *balancer.Node) bool {
	for _, p := range g.pools {
		if p.Node(n.Addr()) == n {
			return true
		}
	}
	return false
}

// h2Set is the HTTP/2 connections of g's pool named pool to node n; nil
// when the pool or the node is gone, or the pool is not "h2".
func (g *generation) h2Set(pool string, n *balancer.Node) *h2.Set {
	if p := g.pools[pool]; p != nil {
		return p.H2[n]
	}
	return nil
}

// build makes the generation for cfg, reusing old's pools and nodes where
// names and addresses match, with certs as cfg's TLS files read. It
// changes nothing that is running; gone lists the nodes old had that cfg
// drops.
func (s *Server) build(cfg *conf.Config, old *generation, certs *edge.CertSet, nodeTLS map[string]*upstream.NodeTLS) (*generation, []leaving, error) {
	g := &generation{
		cfg:              cfg,
		pools:            make(map[string]*upstream.Pool, len(cfg.Pools)),
		nodes:            balancer.NewRegistry(),
		handshakeTimeout: cfg.Gateway.HandshakeTimeout.Duration,
		retryAfter:       max(1, int(cfg.Gateway.RetryAfter.Seconds())),
	}
	if cfg.Gateway.TunnelEngine == "goroutines" {
		g.engine = tunnel.EngineGoroutines
	}
	g.tls, g.nodeTLS = certs, nodeTLS
	if old != nil {
		g.nodes = old.nodes
	}
	for _, t := range cfg.Gateway.TrustedProxies {
		pfx, err := conf.ParsePrefix(t) // validated: never fails
		if err != nil {
			return nil, nil, err
		}
		g.trusted = append(g.trusted, pfx)
	}
	var gone []leaving
	for i := range cfg.Pools {
		var op *upstream.Pool
		if old != nil {
			op = old.pools[cfg.Pools[i].Name]
		}
		p, _, removed, err := upstream.NewPool(&cfg.Pools[i], nodeTLS[cfg.Pools[i].Name], op, g.nodes, s.log, s.countDialError, newPoolRate)
		if err != nil {
			return nil, nil, err
		}
		if p.Conf.Protocol == "h2" {
			var poll h2.SpreadPoller
			if g.engine != tunnel.EngineGoroutines {
				poll = pollH2
			}
			p.H2Backoff = floodPolicy(cfg)
			p.OpenH2(op, h2Connections(cfg, p.Conf), h2.Config{WriteTimeout: cfg.Gateway.WriteTimeout.Duration}, poll, cfg.Gateway.DrainWindow.Duration)
		}
		g.pools[p.Name] = p
		for _, n := range removed {
			gone = append(gone, leaving{op, n})
		}
	}
	if old != nil {
		for name, op := range old.pools {
			if g.pools[name] != nil {
				continue
			}
			for _, n := range op.Balancer.Nodes() {
				gone = append(gone, leaving{op, n})
			}
		}
	}
	g.routes = route.Compile(cfg, g.pools)
	return g, gone, nil
}

// needsRestart lists the changes from old to cfg that a reload cannot
// apply: the sockets the gateway listens on and whether they read a PROXY
// header, fasthttp's own read timeout for handshakes, and the log's format.
func needsRestart(old, cfg *conf.Config) []string {
	var out []string
	if old.Gateway.Listen != cfg.Gateway.Listen || !slices.Equal(old.Gateway.Listeners, cfg.Gateway.Listeners) ||
		old.Gateway.ReusePort != cfg.Gateway.ReusePort {
		out = append(out, "gateway.listen/listeners")
	}
	if old.Gateway.Pollers != cfg.Gateway.Pollers {
		out = append(out, "gateway.pollers")
	}
	if old.Gateway.TLS.Listen != cfg.Gateway.TLS.Listen {
		out = append(out, "gateway.tls.listen")
	}
	if !reflect.DeepEqual(old.Gateway.TLS.ACME, cfg.Gateway.TLS.ACME) {
		out = append(out, "gateway.tls.acme")
	}
	if old.Gateway.TLS.H2MaxStreams != cfg.Gateway.TLS.H2MaxStreams {
		out = append(out, "gateway.tls.h2_max_streams")
	}
	if old.Gateway.ProxyProtocol != cfg.Gateway.ProxyProtocol {
		out = append(out, "gateway.proxy_protocol")
	}
	if old.Admin.Listen != cfg.Admin.Listen {
		out = append(out, "admin.listen")
	}
	if old.Gateway.RevokeRedis != cfg.Gateway.RevokeRedis {
		out = append(out, "gateway.revoke_redis")
	}
	if old.Admin.TokenEnv != cfg.Admin.TokenEnv {
		out = append(out, "admin.token_env")
	}
	if old.Log.Format != cfg.Log.Format {
		out = append(out, "log.format")
	}
	if old.Gateway.HandshakeTimeout != cfg.Gateway.HandshakeTimeout {
		out = append(out, "gateway.handshake_timeout (reading the request; the handshake's own deadlines use the new value)")
	}
	return out
}

// recordReload keeps the outcome for the admin API and the metrics; it is
// called with reload.mu held.
func (s *Server) recordReload(err error, trigger string, changes, restart []string, start time.Time) {
	st := ReloadStatus{At: time.Now(), OK: err == nil, Generation: s.current().n, Trigger: trigger,
		TookMS: float64(time.Since(start).Microseconds()) / 1000, Changes: changes, Restart: restart}
	st.Result = ReloadOK
	if err != nil {
		st.Error = err.Error()
		st.Result = ReloadError
		s.log.Error("config reload failed; the running config stays", "trigger", trigger, "err", err)
	} else if st.Changes == nil {
		st.Changes = []string{}
	}
	if s.metrics != nil {
		s.metrics.Reloads.WithLabelValues(st.Result).Inc()
		s.metrics.Generation.Set(float64(st.Generation))
	}
	s.reload.last = st
}

// LastReload is how the last reload went; before the first, its Result is
// ReloadNone and Generation the one in force.
func (s *Server) LastReload() ReloadStatus {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	if s.reload.last.Result == "" {
		return ReloadStatus{Result: ReloadNone, Generation: s.current().n}
	}
	return s.reload.last
}

// newPoolRate is a new pool's [pools.admission] rate.
func newPoolRate(rate, burst int) upstream.Admission { return admit.NewPoolRate(rate, burst) }

// pollH2 has a tunnel poller read an HTTP/2 connection to a node, so that
// the tunnels carried on it run on that poller, one the node's other
// connections are not read by while there is one (see
// tunnel.AttachConnBeside).
func pollH2(nc net.Conn, c *h2.Conn, busy []any) (any, func()) {
	return tunnel.AttachConnBeside(nc, c, busy)
}

// h2Connections is how many HTTP/2 connections an "h2" pool spreads each
// node's streams over: pools.h2_connections, or one per poller (those
// running, or those gateway.pollers or the cores will start).
func h2Connections(cfg *conf.Config, pc *conf.Pool) int {
	if pc.H2Connections > 0 {
		return pc.H2Connections
	}
	if n := tunnel.Pollers(); n > 0 {
		return n
	}
	if cfg.Gateway.Pollers > 0 {
		return cfg.Gateway.Pollers
	}
	return runtime.GOMAXPROCS(0)
}
