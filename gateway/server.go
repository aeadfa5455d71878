// Package gateway is the wsgate server: it builds a generation from a
// config (prepare, outside the reload lock) and swaps it in (commit, under
// it), starts and drains the listeners, and wires the packages of
// gateway/internal that do the work, each through the small interface it
// declares: edge (the accept path), admit (a request's admission), route
// and upstream (where it goes), upgrade (the handshake toward a node),
// registry and tunnel (the live tunnels), rebalance, discover,
// sharedcount and revoke, admin and telemetry. docs/architecture.md draws
// the packages and says what each is.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/discover"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/rebalance"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/revoke"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/sharedcount"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/internal/fastlog"
	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/internal/rlimit"
)

// readBufferSize is fasthttp's per-connection read buffer, which bounds the
// request headers a client may send.
const readBufferSize = upgrade.ReadBufferSize

// generation is one config as the gateway runs it: routes compiled, pools
// built. A request reads the current generation once and uses it to the
// end; a reload builds a whole new one and swaps it in.
type generation struct {
	n                uint64
	cfg              *conf.Config
	routes           route.Table
	pools            map[string]*upstream.Pool
	nodes            *balancer.Registry // every pool's nodes, shared by all generations
	handshakeTimeout time.Duration
	retryAfter       int            // seconds
	engine           tunnel.Engine  // how new tunnels run (gateway.tunnel_engine)
	tls              *edge.CertSet  // the TLS listener's files as loaded; nil without one
	trusted          []netip.Prefix // gateway.trusted_proxies

	// nodeTLS is each [pools.tls] as loaded, by pool name.
	nodeTLS map[string]*upstream.NodeTLS
}

// Server is one gateway: its listeners, pools, routes and live tunnels. Create
// it with New, then Start; Shutdown drains it. Its methods are safe for
// concurrent use.
type Server struct {
	log     *slog.Logger
	gen     atomic.Pointer[generation]
	limits  *edge.Limiter
	ipRate  *admit.IPRate // handshake_rate_per_ip
	tunnels registry.Tunnels
	// proxyErrs throttles the log lines of failed plain requests.
	proxyErrs proxyErrors

	// onTunnelEnd is tunnelEnded as a func value, made once: every
	// tunnel's OnEnd shares it.
	onTunnelEnd func(*tunnel.Tunnel)

	metrics *telemetry.Metrics
	reload  reloadState
	// switches are the handshakes between the node's 101 and the tunnel;
	// it holds those whose 101 waits for fasthttp to flush earlier
	// answers, by client connection (see upgrade.Switch.Run).
	switches upgrade.Switches
	plugins  *pluginhost.Host // auth plugins; started by Start
	access   *telemetry.AccessLog
	tls      *edge.Certificates // the TLS listener's certificates and their watcher
	acme     acmeState          // [gateway.tls.acme]: the ACME manager, if any, and its counters

	disc *discover.Set // [pools.discovery] watchers and the nodes they found

	revocations *revoke.Revoker // credentials refused, shared with other replicas

	rebal  *rebalance.Rebalancer // [pools.rebalance]; started by Start
	shared *sharedcount.Set      // [pools.shared_counts] sharers

	http      *fasthttp.Server
	h2        *h2serve.Server // the TLS listener's HTTP/2 (clienth2.go); nil without a TLS listener
	h2conns   sync.Map        // net.Conn -> *h2Conn: the client HTTP/2 connections served
	floods    *clientFloods   // client addresses cut for flooding, refused at accept (flood.go)
	admin     *fasthttp.Server
	listen    ListenFunc
	inherited bool // listen hands out inherited sockets
	listeners []net.Listener
	opened    []string     // the address each of listeners was opened for
	tlsLn     net.Listener // the TLS client listener, also in listeners; nil without one
	adminLn   net.Listener
	adminAt   string // the address adminLn was opened for
	serving   sync.WaitGroup
	draining  atomic.Bool
	ready     atomic.Bool
	broken    atomic.Bool // an accept loop stopped outside Shutdown
	failed    chan error  // the first such stop; see Failed
}

// ListenFunc opens a listener for a configured address; a restart passes
// one that hands out sockets inherited from the previous process.
type ListenFunc func(addr string) (net.Listener, error)

// New builds a gateway from a loaded, validated config. It opens no socket.
func New(cfg *conf.Config, log *slog.Logger) (*Server, error) {
	// The first gateway of the process decides (a restart changes it).
	tunnel.SetPollers(cfg.Gateway.Pollers)
	s := &Server{
		log:    log,
		limits: edge.NewLimiter(cfg.Gateway.MaxConns, cfg.Gateway.MaxConnsPerIP, fileCeiling(log)),
		ipRate: admit.NewIPRate(cfg.Gateway.HandshakeRatePerIP, cfg.Gateway.HandshakeBurstPerIP),
		floods: newClientFloods(cfg, log),
		listen: func(addr string) (net.Listener, error) { return edge.ListenTCP(addr, false) },
		failed: make(chan error, 1),
		tls:    edge.NewCertificates(log),
	}
	if err := s.newACME(cfg); err != nil {
		return nil, err
	}
	set, err := s.tls.Load(cfg)
	if err != nil {
		s.stopACME()
		return nil, err
	}
	nodeTLS, err := upstream.LoadTLS(cfg)
	if err != nil {
		s.stopACME()
		return nil, err
	}
	g, _, err := s.build(cfg, nil, set, nodeTLS)
	if err != nil {
		s.stopACME()
		return nil, err
	}
	s.tls.Swap(g.tls) // not watched before Start
	g.n = 1
	s.gen.Store(g)
	s.access = telemetry.NewAccessLog(log, func() bool { return s.current().cfg.Log.Access })
	s.onTunnelEnd = s.tunnelEnded
	s.switches.Host = switchHost{s}
	s.tunnels.OnIdle(s.requestSweep)
	s.metrics = telemetry.NewMetrics(liveSource{s})
	s.registerTLSMetrics()
	s.floods.register(s.metrics.Reg, s)
	s.revocations = revoke.New(log, &s.tunnels, s.metrics.Revocations)
	api, err := admin.New(adminView{s}, s.metrics.Reg)
	if err != nil {
		s.stopACME()
		return nil, err
	}
	s.disc = newDiscovery(s)
	s.shared = newSharedCounts(s)
	s.http = &fasthttp.Server{
		Handler:               s.withACMEChallenges(s.handle),
		ConnState:             s.connState,
		Name:                  "wsgate",
		ReadTimeout:           g.handshakeTimeout,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           60 * time.Second,
		ReadBufferSize:        readBufferSize,
		Concurrency:           s.limits.Concurrency(),
		KeepHijackedConns:     true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true, // no request bytes (tokens) in the log
		Logger:                fastlog.Logger{Log: log},
	}
	if cfg.Gateway.TLS.Listen != "" {
		// Registered whatever gateway.tls.h2 says: the certificate set
		// in force decides whether ALPN offers h2, so a reload can turn
		// it on.
		s.h2 = s.newClientH2(cfg)
		s.http.NextProto("h2", s.serveH2)
		s.registerH2Metrics()
	}
	s.admin = &fasthttp.Server{
		Handler:               api.Handle,
		Name:                  "wsgate-admin",
		ReadTimeout:           10 * time.Second,
		WriteTimeout:          10 * time.Second, // a client that never reads holds no write
		SecureErrorLogMessage: true,
		Logger:                fastlog.Logger{Log: log},
	}
	return s, nil
}

// fileCeiling is how many client connections the open-file limit in force
// carries (see rlimit.MaxConns); 0 when the limit cannot be read.
func fileCeiling(log *slog.Logger) int {
	soft, _, err := rlimit.NoFile()
	if err != nil {
		log.Warn("max_conns not held to the open-file limit", "err", err)
		return 0
	}
	return rlimit.MaxConns(soft)
}

// logLimits says which connection limits apply. That the open-file
// limit holds max_conns below its configured value is a warning when the
// file set max_conns (the operator's number is not what runs), and part
// of the INFO line when max_conns is its default, which is meant as "as
// many as the machine carries".
func (s *Server) logLimits() {
	conf, eff, perIP := s.limits.Limits()
	attrs := []any{"max_conns", eff, "configured", conf, "max_conns_per_ip", perIP, "file_ceiling", s.limits.Ceiling()}
	switch {
	case eff < conf && s.current().cfg.Written("gateway.max_conns"):
		s.log.Warn("max_conns held to what the open-file limit carries (two descriptors a connection, less a reserve)", attrs...)
	case eff < conf:
		attrs[3] = fmt.Sprintf("default (%d)", conf)
		s.log.Info("connection limits: max_conns is what the open-file limit carries (two descriptors a connection, less a reserve)", attrs...)
	default:
		s.log.Info("connection limits", attrs...)
	}
}

// current is the generation in force.
func (s *Server) current() *generation { return s.gen.Load() }

// SetListen replaces how Start opens listeners (before Start): a restarted
// process passes one that hands out the sockets it inherited.
func (s *Server) SetListen(f ListenFunc) {
	s.listen = f
	s.inherited = true
}

// Start opens the client and admin listeners and serves them in the
// background. The gateway is ready once Start returns nil.
func (s *Server) Start() error {
	g := s.current()
	plugins, err := pluginhost.New(g.cfg.Plugins, pluginhost.Options{Logger: s.log, Observer: s.metrics.PluginObserver()})
	if err != nil {
		return fmt.Errorf("auth plugins: %w", err)
	}
	s.plugins = plugins
	if err := s.revocations.Start(g.cfg.Gateway.RevokeRedis); err != nil {
		_ = plugins.Close()
		return err
	}
	addrs := append([]string{g.cfg.Gateway.Listen}, g.cfg.Gateway.Listeners...)
	if a := g.cfg.Gateway.TLS.Listen; a != "" {
		addrs = append(addrs, a) // the last: see tlsLn below
	}
	for _, a := range addrs {
		listen := s.listen
		if g.cfg.Gateway.ReusePort && !s.inherited {
			listen = edge.ListenReusePort
		}
		ln, err := listen(a)
		if err != nil {
			s.closeListeners()
			s.stopPluginsAndRevocations()
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		s.listeners = append(s.listeners, ln)
		s.opened = append(s.opened, a)
	}
	if g.cfg.Gateway.TLS.Listen != "" {
		s.tlsLn = s.listeners[len(s.listeners)-1]
	}
	if a := g.cfg.Admin.Listen; a != "" {
		ln, err := s.listen(a)
		if err != nil {
			s.closeListeners()
			s.stopPluginsAndRevocations()
			return fmt.Errorf("admin listen on %s: %w", a, err)
		}
		s.adminLn, s.adminAt = ln, a
		s.serve(s.admin, edge.NewListener(ln, nil, edgeMetrics{s.metrics}, s.log, nil, s.retryAfter))
		s.log.Info("listening", "listener", "admin", "addr", ln.Addr().String())
	}
	for _, p := range g.pools {
		p.StartHealth(s.metrics.ProbeObserver(p.Name))
	}
	s.shared.Sync(g.cfg)
	for _, ln := range s.listeners {
		l := edge.NewListener(ln, s.limits, edgeMetrics{s.metrics}, s.log, s.access, s.retryAfter).WithBackoff(s.floods)
		if g.cfg.Gateway.ProxyProtocol {
			l.ProxyProtocol(func(ip netip.Addr) bool { return s.current().trusts(ip) },
				func() time.Duration { return s.current().handshakeTimeout })
		}
		kind := "plain"
		if ln == s.tlsLn {
			l.WithTLS(s.tls.Config(), func() time.Duration { return s.current().handshakeTimeout })
			kind = "tls"
		}
		s.serve(s.http, l)
		s.log.Info("listening", "listener", kind, "addr", ln.Addr().String(), "proxy_protocol", g.cfg.Gateway.ProxyProtocol)
	}
	s.startTLSWatch()
	if err := s.startACME(); err != nil {
		s.log.Error("ACME: certificates not managed", "err", err)
	}
	s.disc.Sync(s.current().cfg)
	s.logLimits()
	s.rebal = rebalance.Start(rebalanceView{s}, &s.tunnels, s.log)
	s.ready.Store(true)
	if s.broken.Load() { // an accept loop stopped before the line above
		s.ready.Store(false)
	}
	return nil
}

// retryAfter is the Retry-After of the generation in force, in seconds.
func (s *Server) retryAfter() int { return s.current().retryAfter }

// serve runs srv's accept loop on ln. Outside Shutdown the loop never ends
// (transient accept errors are outlived by the listener); if it does, the
// gateway is broken: see fail.
func (s *Server) serve(srv *fasthttp.Server, ln net.Listener) {
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		err := srv.Serve(ln)
		if s.draining.Load() {
			return
		}
		if err == nil {
			err = net.ErrClosed
		}
		s.fail(fmt.Errorf("accept loop on %s stopped: %w", ln.Addr(), err))
	}()
}

// fail marks the gateway broken: /readyz answers 503 from now on, and
// Failed delivers err (the first one) to whoever supervises the process.
func (s *Server) fail(err error) {
	s.broken.Store(true)
	s.ready.Store(false)
	s.log.Error("gateway broken: a listener no longer accepts; not ready, exit and restart", "err", err)
	select {
	case s.failed <- err:
	default:
	}
}

// Failed delivers the error that stopped a listener's accept loop outside
// Shutdown. The gateway then accepts nothing on that listener and reports
// not ready; the process should shut down and exit non-zero so its
// supervisor restarts it. Out-of-descriptor errors never stop a loop.
func (s *Server) Failed() <-chan error { return s.failed }

func (s *Server) closeListeners() {
	for _, ln := range s.listeners {
		_ = ln.Close()
	}
	if s.adminLn != nil {
		_ = s.adminLn.Close()
	}
}

// Listeners returns the open listeners, client (TLS too) and admin alike, by the
// configured address Start opened each for, so a restart can hand them to
// the next process. A reload that changed an address since does not
// rename its socket: the next process opens the new address itself.
func (s *Server) Listeners() map[string]net.Listener {
	out := map[string]net.Listener{}
	for i, ln := range s.listeners {
		out[s.opened[i]] = ln
	}
	if s.adminLn != nil {
		out[s.adminAt] = s.adminLn
	}
	return out
}

// Addr is the address of the first client listener (nil before Start).
func (s *Server) Addr() net.Addr {
	if len(s.listeners) == 0 {
		return nil
	}
	return s.listeners[0].Addr()
}

// TLSAddr is the address of the TLS client listener (nil without one, or
// before Start).
func (s *Server) TLSAddr() net.Addr {
	if s.tlsLn == nil {
		return nil
	}
	return s.tlsLn.Addr()
}

// AdminAddr is the address of the admin listener (nil when disabled).
func (s *Server) AdminAddr() net.Addr {
	if s.adminLn == nil {
		return nil
	}
	return s.adminLn.Addr()
}

// Tunnels is the number of live WebSocket tunnels.
func (s *Server) Tunnels() int { return s.tunnels.Len() }

// Shutdown drains the gateway: it stops accepting, turns readiness false,
// closes every tunnel with 1001 spread evenly over drain_window, waits for
// the close handshakes until drain_timeout (or ctx), cuts what is left, and
// stops the admin listener last.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.draining.Swap(true) {
		return errors.New("gateway: already shutting down")
	}
	s.ready.Store(false)
	s.rebal.Stop() // before the drain: it moves nobody the drain is closing
	s.stopTLSWatch()
	s.stopACME()
	s.disc.Stop()
	g := s.current()
	window := g.cfg.Gateway.DrainWindow.Duration
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Gateway.DrainTimeout.Duration)
	defer cancel()

	// Stop accepting; keep-alive HTTP connections close, handshakes in
	// flight finish and their tunnels join the drain.
	stopped := make(chan struct{})
	go func() {
		_ = s.http.ShutdownWithContext(ctx)
		close(stopped)
	}()
	if s.h2 != nil {
		// HTTP/2's own "stop accepting": GOAWAY on every client
		// connection, so no stream opens behind the drain; the streams
		// open go on (each tunnel gets its 1001 below) and a connection
		// closes once its last stream has ended.
		s.h2.Drain() // and to a connection whose preface is still on its way
	}

	s.metrics.Drains.WithLabelValues("gateway").Inc()
	// Said as the window opens, not once it has passed.
	s.log.Info("draining", "tunnels", s.tunnels.Len(), "window", window, "timeout", g.cfg.Gateway.DrainTimeout.Duration)
	n := s.tunnels.DrainAll(ctx, window, "gateway shutting down")
	left := s.tunnels.Wait(ctx)
	if left > 0 {
		s.log.Warn("drain timeout: cutting tunnels", "left", left)
		s.tunnels.AbortAll()
		s.tunnels.Wait(context.Background())
	}
	s.log.Info("tunnels drained", "told", n, "cut", left)
	<-stopped
	if s.h2 != nil {
		s.h2.Close() // what the drain timeout left: streams whose client never ended them
	}
	if left == 0 && ctx.Err() != nil {
		// The drain timeout passed with handshakes still in flight:
		// their tunnels are cut as they come, not told to go away.
		s.tunnels.AbortAll()
		s.tunnels.Wait(context.Background())
	}
	for _, ln := range s.listeners {
		_ = ln.Close()
	}
	if s.adminLn != nil {
		// Bounded by the drain timeout too: an admin connection that
		// does not end (a client pipelining requests it never reads
		// the answers of) must not hold Shutdown.
		_ = s.admin.ShutdownWithContext(ctx)
		// fasthttp's Shutdown closes only the listeners its Serve has
		// registered: one whose Serve has not started yet (a Shutdown
		// right after Start) would be accepted on forever.
		_ = s.adminLn.Close()
	}
	s.serving.Wait()
	s.reload.mu.Lock() // no reload may start a checker from here on
	for _, p := range s.current().pools {
		p.Close()
	}
	sharers := s.shared.TakeAll()
	s.stopPluginsAndRevocations()
	s.reload.mu.Unlock()
	sharedcount.StopAll(sharers) // their last Redis calls, without the lock
	return nil
}

func (s *Server) stopPluginsAndRevocations() {
	s.revocations.Stop()
	if s.plugins != nil {
		_ = s.plugins.Close()
	}
}
