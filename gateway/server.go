// Package gateway is the wsgate server: client listeners, routing by host and
// path, the WebSocket handshake relayed to a node picked by the pool's
// balancer, the tunnel, plain HTTP proxying, the admin listener, config
// reloads, and drain.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"golang.org/x/sys/unix"
)

// readBufferSize is fasthttp's per-connection read buffer, which bounds the
// request headers a client may send.
const readBufferSize = 8 << 10

// generation is one config as the gateway runs it: routes compiled, pools
// built. A request reads the current generation once and uses it to the
// end; a reload builds a whole new one and swaps it in.
type generation struct {
	n                uint64
	cfg              *conf.Config
	routes           routeTable
	pools            map[string]*pool
	handshakeTimeout time.Duration
	retryAfter       int // seconds
}

// Server is one gateway: its listeners, pools, routes and live tunnels. Create
// it with New, then Start; Shutdown drains it. Its methods are safe for
// concurrent use.
type Server struct {
	log     *slog.Logger
	gen     atomic.Pointer[generation]
	limits  *limiter
	tunnels registry
	metrics *metrics
	reload  reloadState
	plugins *pluginhost.Host // auth plugins; started by Start

	revokeBus *redis.Client // revocations shared with other replicas
	revokeSub *redis.PubSub
	revoked   revokedSet // subjects refused new handshakes

	http      *fasthttp.Server
	admin     *fasthttp.Server
	listen    ListenFunc
	inherited bool // listen hands out inherited sockets
	listeners []net.Listener
	adminLn   net.Listener
	serving   sync.WaitGroup
	draining  atomic.Bool
	ready     atomic.Bool
}

// ListenFunc opens a listener for a configured address; a restart passes
// one that hands out sockets inherited from the previous process.
type ListenFunc func(addr string) (net.Listener, error)

// New builds a gateway from a loaded, validated config. It opens no socket.
func New(cfg *conf.Config, log *slog.Logger) (*Server, error) {
	s := &Server{
		log:    log,
		limits: newLimiter(cfg.Gateway.MaxConns, cfg.Gateway.MaxConnsPerIP),
		listen: func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) },
	}
	g, _, err := s.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	g.n = 1
	s.gen.Store(g)
	s.metrics = newMetrics(s)
	api, err := newAdminAPI(s)
	if err != nil {
		return nil, err
	}
	s.http = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "wsgate",
		ReadTimeout:           g.handshakeTimeout,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           60 * time.Second,
		ReadBufferSize:        readBufferSize,
		Concurrency:           cfg.Gateway.MaxConns + 1024,
		KeepHijackedConns:     true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true, // no request bytes (tokens) in the log
		Logger:                fasthttpLogger{log},
	}
	s.admin = &fasthttp.Server{
		Handler:               api.handle,
		Name:                  "wsgate-admin",
		ReadTimeout:           10 * time.Second,
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{log},
	}
	return s, nil
}

// current is the generation in force.
func (s *Server) current() *generation { return s.gen.Load() }

// SetListen replaces how Start opens listeners (before Start): a restarted
// process passes one that hands out the sockets it inherited.
func (s *Server) SetListen(f ListenFunc) {
	s.listen = f
	s.inherited = true
}

// listenReusePort opens a TCP listener with SO_REUSEPORT set, so other
// processes may listen on the same address.
func listenReusePort(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

// Start opens the client and admin listeners and serves them in the
// background. The gateway is ready once Start returns nil.
func (s *Server) Start() error {
	g := s.current()
	plugins, err := pluginhost.New(g.cfg.Plugins, pluginhost.Options{Logger: s.log, Observer: pluginObserver{s.metrics}})
	if err != nil {
		return fmt.Errorf("auth plugins: %w", err)
	}
	s.plugins = plugins
	if err := s.startRevocations(g.cfg.Gateway.RevokeRedis); err != nil {
		_ = plugins.Close()
		return err
	}
	addrs := append([]string{g.cfg.Gateway.Listen}, g.cfg.Gateway.Listeners...)
	for _, a := range addrs {
		listen := s.listen
		if g.cfg.Gateway.ReusePort && !s.inherited {
			listen = listenReusePort
		}
		ln, err := listen(a)
		if err != nil {
			s.closeListeners()
			s.stopPluginsAndRevocations()
			return fmt.Errorf("listen on %s: %w", a, err)
		}
		s.listeners = append(s.listeners, ln)
	}
	if a := g.cfg.Admin.Listen; a != "" {
		ln, err := s.listen(a)
		if err != nil {
			s.closeListeners()
			s.stopPluginsAndRevocations()
			return fmt.Errorf("admin listen on %s: %w", a, err)
		}
		s.adminLn = ln
		s.serve(s.admin, ln)
	}
	for _, p := range g.pools {
		p.startHealth(probeObserver{m: s.metrics, pool: p.name})
	}
	for _, ln := range s.listeners {
		s.serve(s.http, ln)
	}
	s.ready.Store(true)
	return nil
}

func (s *Server) serve(srv *fasthttp.Server, ln net.Listener) {
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			s.log.Error("serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

func (s *Server) closeListeners() {
	for _, ln := range s.listeners {
		_ = ln.Close()
	}
	if s.adminLn != nil {
		_ = s.adminLn.Close()
	}
}

// Listeners returns the open listeners by configured address, client and
// admin alike, so a restart can hand them to the next process.
func (s *Server) Listeners() map[string]net.Listener {
	g := s.current()
	out := map[string]net.Listener{}
	addrs := append([]string{g.cfg.Gateway.Listen}, g.cfg.Gateway.Listeners...)
	for i, ln := range s.listeners {
		if i < len(addrs) {
			out[addrs[i]] = ln
		}
	}
	if s.adminLn != nil {
		out[g.cfg.Admin.Listen] = s.adminLn
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

// AdminAddr is the address of the admin listener (nil when disabled).
func (s *Server) AdminAddr() net.Addr {
	if s.adminLn == nil {
		return nil
	}
	return s.adminLn.Addr()
}

// Tunnels is the number of live WebSocket tunnels.
func (s *Server) Tunnels() int { return s.tunnels.len() }

// Shutdown drains the gateway: it stops accepting, turns readiness false,
// closes every tunnel with 1001 spread evenly over drain_window, waits for
// the close handshakes until drain_timeout (or ctx), cuts what is left, and
// stops the admin listener last.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.draining.Swap(true) {
		return errors.New("gateway: already shutting down")
	}
	s.ready.Store(false)
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

	s.metrics.drains.WithLabelValues("gateway").Inc()
	n := s.tunnels.drainAll(ctx, window, "gateway shutting down")
	s.log.Info("draining", "tunnels", n, "window", window)
	left := s.tunnels.wait(ctx)
	if left > 0 {
		s.log.Warn("drain timeout: cutting tunnels", "left", left)
		s.tunnels.abortAll()
		s.tunnels.wait(context.Background())
	}
	<-stopped
	for _, ln := range s.listeners {
		_ = ln.Close()
	}
	if s.adminLn != nil {
		_ = s.admin.Shutdown()
	}
	s.serving.Wait()
	s.reload.mu.Lock() // no reload may start a checker from here on
	defer s.reload.mu.Unlock()
	for _, p := range s.current().pools {
		p.close()
	}
	s.stopPluginsAndRevocations()
	return nil
}

func (s *Server) stopPluginsAndRevocations() {
	if s.revokeSub != nil {
		_ = s.revokeSub.Close()
		_ = s.revokeBus.Close()
	}
	if s.plugins != nil {
		_ = s.plugins.Close()
	}
}

// fasthttpLogger routes fasthttp's own messages into the gateway's log.
type fasthttpLogger struct{ log *slog.Logger }

// quoted matches a Go-quoted string in a fasthttp message.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// Printf logs a fasthttp message with every quoted string but the
// connection's addresses hidden: fasthttp quotes the request's own bytes
// (a header value it could not parse, say "Bearer <token>"), even with
// SecureErrorLogMessage.
func (l fasthttpLogger) Printf(format string, args ...any) {
	msg := quoted.ReplaceAllStringFunc(fmt.Sprintf(format, args...), func(q string) string {
		if s, err := strconv.Unquote(q); err == nil {
			if _, err := netip.ParseAddrPort(s); err == nil {
				return q
			}
		}
		return `"(request bytes hidden)"`
	})
	l.log.Debug(msg)
}
