package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Binaries are the executables a stack runs.
type Binaries struct {
	// WSGate, Relay and WSLoad are paths of wsgate, relay-backend and wsload.
	WSGate, Relay, WSLoad string
	// Redis is the redis-server executable (default: found in PATH).
	Redis string
}

// Build compiles wsgate, relay-backend and wsload from the module at root
// into dir (without the race detector: these are the binaries measured).
func Build(ctx context.Context, root, dir string) (Binaries, error) {
	b := Binaries{
		WSGate: filepath.Join(dir, "wsgate"),
		Relay:  filepath.Join(dir, "relay-backend"),
		WSLoad: filepath.Join(dir, "wsload"),
	}
	for pkg, out := range map[string]string{"./cmd/wsgate": b.WSGate, "./relay-backend": b.Relay, "./cmd/wsload": b.WSLoad} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if o, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w\n%s", pkg, err, o)
		}
	}
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		return b, fmt.Errorf("find redis-server: %w", err)
	}
	b.Redis = redis
	return b, nil
}

// Options shape a stack.
type Options struct {
	// Dir holds the logs and the gateway configs (required).
	Dir string
	// Bins are the executables (required).
	Bins Binaries
	// Relays is the number of relay-backend processes (default 2).
	Relays int
	// Gateways is the number of wsgate processes, each with its own client
	// and admin port, all in front of every relay (default 1).
	Gateways int
	// DrainWindow is the gateway's and the relays' drain window (default 2s).
	DrainWindow time.Duration
	// TunnelEngine is the gateways' gateway.tunnel_engine ("" = their
	// default).
	TunnelEngine string
	// Pollers is the gateways' gateway.pollers (0 = their default).
	Pollers int
	// Protocol is the gateways' pools.protocol ("" = their default).
	Protocol string
	// H2Connections is the gateways' pools.h2_connections, the HTTP/2
	// connections to each relay with Protocol "h2" (0 = their default).
	H2Connections int
	// OneCore also starts the gateway held to one core, as the peers are
	// (nginx's one worker, HAProxy's one thread): GOMAXPROCS=1 and one
	// poller, on its own ports, in front of every relay (Stack.OneCore).
	OneCore bool
	// H2 also starts a gateway with its defaults whose pool reaches the
	// relays over HTTP/2 (pools.protocol = "h2"), on its own ports
	// (Stack.H2).
	H2 bool
	// GatewayEnv ("KEY=value") is added to every gateway's environment,
	// the one-core gateway's included: a GODEBUG or GOGC to measure. It
	// cannot undo the one-core gateway's GOMAXPROCS=1.
	GatewayEnv []string
}

// Relay is one running relay-backend.
type Relay struct {
	*Proc
	// Addr is its 127.0.0.1:port listener.
	Addr string
}

// Gateway is one running wsgate.
type Gateway struct {
	*Proc
	// Addr is the client listener, Admin the admin listener (127.0.0.1:port).
	Addr, Admin string
	// Config is the path of its TOML config.
	Config string
}

// Stack is a running redis-server, relays and gateways. It is not safe for
// concurrent use except for the methods of its processes.
type Stack struct {
	// Redis is redis-server, RedisAddr its 127.0.0.1:port.
	Redis     *Proc
	RedisAddr string
	// Relays and Gateways are the running processes, in start order.
	Relays   []*Relay
	Gateways []*Gateway
	// OneCore is the gateway held to one core (Options.OneCore), apart
	// from Gateways; nil unless asked for.
	OneCore *Gateway
	// H2 is the gateway reaching the relays over HTTP/2 (Options.H2),
	// apart from Gateways; nil unless asked for.
	H2 *Gateway
	// Peers are the nginx and HAProxy processes started by StartPeer.
	Peers []*Peer
	opt   Options
	procs []*Proc
	peers []*Peer // every peer started, ready or not
}

// Up starts redis-server, then the relays, then the gateways, waiting for
// each to answer. On an error it stops what it started.
func Up(opt Options) (s *Stack, err error) {
	if opt.Relays <= 0 {
		opt.Relays = 2
	}
	if opt.Gateways <= 0 {
		opt.Gateways = 1
	}
	if opt.DrainWindow <= 0 {
		opt.DrainWindow = 2 * time.Second
	}
	s = &Stack{opt: opt}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.startRedis(); err != nil {
		return s, err
	}
	for i := range opt.Relays {
		if _, err := s.StartRelay(fmt.Sprintf("relay-%d", i+1), ""); err != nil {
			return s, err
		}
	}
	for i := range opt.Gateways {
		g, err := s.startGateway(fmt.Sprintf("wsgate-%d", i+1), s.opt.Pollers, nil)
		if err != nil {
			return s, err
		}
		s.Gateways = append(s.Gateways, g)
	}
	if opt.OneCore {
		g, err := s.startGateway("wsgate-1core", 1, []string{"GOMAXPROCS=1"})
		if err != nil {
			return s, err
		}
		s.OneCore = g
	}
	if opt.H2 {
		g, err := s.startGateway("wsgate-h2", s.opt.Pollers, nil)
		if err != nil {
			return s, err
		}
		s.H2 = g
	}
	return s, nil
}

func (s *Stack) add(p *Proc) *Proc {
	s.procs = append(s.procs, p)
	return p
}

func (s *Stack) startRedis() error {
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := Start("redis", filepath.Join(s.opt.Dir, "redis.log"), s.opt.Bins.Redis,
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.opt.Dir, "--loglevel", "warning", "--maxclients", "10000")
	if err != nil {
		return err
	}
	s.Redis = s.add(p)
	s.RedisAddr = addr
	return waitReady(p, 10*time.Second, func() error { return redisPing(addr) })
}

// StartRelay starts one relay-backend named id on Redis, on addr ("" = a
// free port), and waits for its /healthz. A relay restarted on the address
// of a killed one is how a kill scenario brings it back.
func (s *Stack) StartRelay(id, addr string) (*Relay, error) {
	if addr == "" {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		addr = a
	}
	p, err := Start(id, filepath.Join(s.opt.Dir, id+".log"), s.opt.Bins.Relay, s.RelayArgs(id, addr)...)
	if err != nil {
		return nil, err
	}
	s.add(p)
	r := &Relay{Proc: p, Addr: addr}
	if err := waitReady(p, 10*time.Second, func() error { return httpOK("http://" + addr + "/healthz") }); err != nil {
		return nil, err
	}
	for i, old := range s.Relays {
		if old.Addr == addr {
			s.Relays[i] = r
			return r, nil
		}
	}
	s.Relays = append(s.Relays, r)
	return r, nil
}

// RestartRelay starts relay id again on its address, as after a kill: a
// relay still running is first stopped by its PID (SIGTERM, then SIGKILL
// after 10s). The new process replaces the old one in Relays, at the same
// index; Close stops it with the rest.
func (s *Stack) RestartRelay(id string) (*Relay, error) {
	for _, r := range s.Relays {
		if r.Name == id {
			r.Stop(10 * time.Second)
			return s.StartRelay(id, r.Addr)
		}
	}
	return nil, fmt.Errorf("restart relay %q: no such relay", id)
}

// RelayArgs is the relay-backend command line of replica id on addr.
func (s *Stack) RelayArgs(id, addr string) []string {
	return []string{"-listen", addr, "-redis", "redis://" + s.RedisAddr + "/0", "-id", id,
		"-drain-window", s.opt.DrainWindow.String()}
}

// startGateway starts the gateway name on free ports with pollers (its
// gateway.pollers; 0 = its default) and env and Options.GatewayEnv added
// to its environment, and waits for its /readyz.
func (s *Stack) startGateway(name string, pollers int, env []string) (*Gateway, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(s.opt.Dir, name+".toml")
	text := s.gatewayConfig(addr, admin, pollers)
	if name == "wsgate-h2" {
		text = strings.Replace(text, "balance = \"least_conn\"\n", "balance = \"least_conn\"\nprotocol = \"h2\"\n", 1)
	} else if s.opt.Protocol != "" {
		text = strings.Replace(text, "balance = \"least_conn\"\n", fmt.Sprintf("balance = \"least_conn\"\nprotocol = %q\n", s.opt.Protocol), 1)
	}
	if s.opt.H2Connections > 0 {
		text = strings.Replace(text, "balance = \"least_conn\"\n", fmt.Sprintf("balance = \"least_conn\"\nh2_connections = %d\n", s.opt.H2Connections), 1)
	}
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", cfg, err)
	}
	// The gateway's own settings go last, so they win over GatewayEnv
	// (the one-core gateway stays at GOMAXPROCS=1).
	env = append(slices.Clip(s.opt.GatewayEnv), env...)
	p, err := StartEnv(name, filepath.Join(s.opt.Dir, name+".log"), env, s.opt.Bins.WSGate, "-config", cfg)
	if err != nil {
		return nil, err
	}
	s.add(p)
	g := &Gateway{Proc: p, Addr: addr, Admin: admin, Config: cfg}
	if err := waitReady(p, 15*time.Second, func() error { return httpOK("http://" + admin + "/readyz") }); err != nil {
		return nil, err
	}
	return g, nil
}

// GatewayConfig is the TOML of a gateway on addr and admin in front of every
// relay: one least_conn pool "relay", every path routed to it, defaults
// elsewhere.
func (s *Stack) GatewayConfig(addr, admin string) string {
	return s.gatewayConfig(addr, admin, s.opt.Pollers)
}

func (s *Stack) gatewayConfig(addr, admin string, pollers int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[gateway]\nlisten = %q\ndrain_window = %q\ndrain_timeout = \"30s\"\n", addr, s.opt.DrainWindow.String())
	if s.opt.TunnelEngine != "" {
		fmt.Fprintf(&b, "tunnel_engine = %q\n", s.opt.TunnelEngine)
	}
	if pollers > 0 {
		fmt.Fprintf(&b, "pollers = %d\n", pollers)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[admin]\nlisten = %q\n\n", admin)
	b.WriteString("[[pools]]\nname = \"relay\"\nbalance = \"least_conn\"\n")
	b.WriteString("  [pools.health]\n  interval = \"1s\"\n  timeout = \"500ms\"\n")
	for _, r := range s.Relays {
		fmt.Fprintf(&b, "  [[pools.nodes]]\n  addr = %q\n", r.Addr)
	}
	b.WriteString("\n[[routes]]\npath_prefix = \"/\"\npool = \"relay\"\n")
	return b.String()
}

// WithAdmission returns the gateway config cfg (as GatewayConfig writes it)
// with a [pools.admission] table of rate (requests per second) and burst
// in its pool, ahead of the nodes.
func WithAdmission(cfg string, rate, burst int) (string, error) {
	const nodes = "  [[pools.nodes]]\n"
	switch {
	case rate < 0 || burst < 0:
		return "", fmt.Errorf("admission rate %d, burst %d: must be >= 0", rate, burst)
	case strings.Contains(cfg, "[pools.admission]"):
		return "", errors.New("the config already has a [pools.admission] table")
	case !strings.Contains(cfg, nodes):
		return "", errors.New("the config has no [[pools.nodes]]")
	}
	return strings.Replace(cfg, nodes, fmt.Sprintf("  [pools.admission]\n  rate = %d\n  burst = %d\n%s", rate, burst, nodes), 1), nil
}

// Reconfigure writes text as the gateway's config and reloads it through
// the admin API (POST /api/reload), returning once the new config is in
// force or the reload was refused.
func (g *Gateway) Reconfigure(text string) error {
	if err := os.WriteFile(g.Config, []byte(text), 0o644); err != nil {
		return fmt.Errorf("reconfigure %s: %w", g.Name, err)
	}
	if err := g.Post("/api/reload"); err != nil {
		return fmt.Errorf("reconfigure %s: %w", g.Name, err)
	}
	return nil
}

// Close stops every process the stack started, by PID: the peers, then
// the gateways, the relays and redis.
func (s *Stack) Close() {
	for _, p := range s.peers {
		p.Stop(10 * time.Second)
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop(10 * time.Second)
	}
}

// RelayInfo is the part of a relay's GET /info the runner reads.
type RelayInfo struct {
	// Replica is the relay's id; Connections its joined clients.
	Replica     string `json:"replica"`
	Connections int    `json:"connections"`
	// Rooms counts rooms with a local member, Subscriptions the bus
	// subscriptions held (one per such room).
	Rooms         int `json:"rooms"`
	Subscriptions int `json:"subscriptions"`
}

// Info reads the relay's /info.
func (r *Relay) Info() (RelayInfo, error) { return ReadInfo(r.Addr) }

// ReadInfo reads GET /info at addr: a relay's, or through a proxy, the
// one of the relay the proxy picked.
func ReadInfo(addr string) (RelayInfo, error) {
	var ri RelayInfo
	body, err := httpGet("http://" + addr + "/info")
	if err != nil {
		return ri, err
	}
	if err := json.Unmarshal(body, &ri); err != nil {
		return ri, fmt.Errorf("decode %s/info: %w", addr, err)
	}
	return ri, nil
}

// Metrics returns the gateway's /metrics text.
func (g *Gateway) Metrics() ([]byte, error) { return httpGet("http://" + g.Admin + "/metrics") }

// Post sends an empty POST to path on the admin listener and expects 200.
func (g *Gateway) Post(path string) error {
	resp, err := httpClient.Post("http://"+g.Admin+path, "application/json", nil) // the admin API refuses other content types
	if err != nil {
		return fmt.Errorf("post %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func httpGet(url string) ([]byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return b, nil
}

func httpOK(url string) error {
	_, err := httpGet(url)
	return err
}

// redisPing sends PING and expects +PONG.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis ping: got %q", line)
	}
	return nil
}
