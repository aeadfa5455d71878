// Command benchrun is wsgate's benchmark runner, run by `make bench`. It
// builds wsgate, relay-backend and wsload, starts redis-server, two relays,
// one gateway with its defaults, one held to one core (GOMAXPROCS=1, one
// poller) and, when installed, nginx and HAProxy in front of the same
// relays, all on 127.0.0.1; runs a fixed set of wsload scenarios directly
// against a relay and through each proxy in the same run, their order
// rotated per repetition; stops every process it started by PID; and
// prints one Markdown table with a column per target (docs/benchmarks.md).
//
// Usage:
//
//	benchrun [-quick] [-dir DIR]     the benchmark (BENCH_QUICK=1 = -quick)
//	benchrun -smoke                  CI smoke: generous thresholds, exit 1 on a violation
//	benchrun -up [-relays N] [-gateways N] [-engine epoll|goroutines] [-pollers N] [-peers]
//	             [-protocol http1|h2] [-h2-connections N] [-gateway-env KEY=value ...]
//	                                 start a stack, print its addresses, wait for Ctrl-C
//	                                 (-peers: nginx and HAProxy too, as make bench runs them;
//	                                 the gateways get the shipped GODEBUG, as in make bench,
//	                                 unless -gateway-env sets GODEBUG)
//
// The benchmark's last phase is a reconnect storm through each HTTP/1.1
// proxy (it kills relay 1, restarting it before each run): see storm.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/bench/internal/stack"
)

// shippedGODEBUG is the environment the Dockerfile and the systemd unit
// give wsgate (docs/operations.md, "The Go runtime's monitor"); make bench
// measures the gateway with it. TestShippedGODEBUG keeps the three equal.
const shippedGODEBUG = "GODEBUG=schedtrace=2147483647"

// plan is the fixed set of scenario sizes of one mode.
type plan struct {
	reps           int // repetitions of the noisy figures (fanout, churn, drain)
	idleN          int
	idleRate       int           // idle connections opened per second
	idleHold       time.Duration // idle hold after the ramp (covers the settle and the reads)
	fanRooms       int
	fanMembers     int
	fanFPS         float64 // frames per second of the fixed-rate fanout: CPU and loaded latency
	fanLightFPS    float64 // frames per second of the light fanout: the extra hop's latency
	fanDuration    time.Duration
	lightDuration  time.Duration
	ladder         []float64 // frames per second of the ladder's steps, lowest first
	ladderDuration time.Duration
	churnWorkers   int
	churnDuration  time.Duration
	stormClients   int           // relay.v1 clients of the reconnect storm, 2 per room
	stormWindow    time.Duration // how long they keep sending after the kill
}

var (
	fullPlan = plan{reps: 3, idleN: 9000, idleRate: 1500, idleHold: 8 * time.Second,
		fanRooms: 50, fanMembers: 10, fanFPS: 12000, fanLightFPS: 5000, fanDuration: 8 * time.Second, lightDuration: 6 * time.Second,
		ladder: []float64{20000, 30000, 40000, 55000, 70000, 85000}, ladderDuration: 5 * time.Second,
		churnWorkers: 50, churnDuration: 5 * time.Second,
		stormClients: 4000, stormWindow: 10 * time.Second}
	quickPlan = plan{reps: 1, idleN: 1000, idleRate: 1000, idleHold: 5 * time.Second,
		fanRooms: 50, fanMembers: 10, fanFPS: 12000, fanLightFPS: 5000, fanDuration: 4 * time.Second, lightDuration: 4 * time.Second,
		ladder: []float64{20000}, ladderDuration: 3 * time.Second,
		churnWorkers: 50, churnDuration: 3 * time.Second,
		stormClients: 1000, stormWindow: 5 * time.Second}
)

// runner holds the stack under measurement.
type runner struct {
	dir     string
	bins    stack.Binaries
	st      *stack.Stack
	targets [numCols]*target
	plan    plan
	seq     int
	log     io.Writer
}

// url is a ws:// URL on addr with a room prefix no other run used, so no
// relay replays history from an earlier run into this one.
func (r *runner) url(addr, kind string) string {
	r.seq++
	return fmt.Sprintf("ws://%s/room/%s%d-%d-r%%d", addr, kind, r.seq, os.Getpid())
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", os.Getenv("BENCH_QUICK") == "1", "reduced set, about 2.5 minutes (also BENCH_QUICK=1)")
	smoke := fs.Bool("smoke", false, "CI smoke test: fanout and idle through the gateway with generous thresholds")
	up := fs.Bool("up", false, "start redis, relays and gateways, print them, wait for Ctrl-C")
	relays := fs.Int("relays", 2, "relay-backend processes (-up)")
	gateways := fs.Int("gateways", 1, "wsgate processes, one port each (-up)")
	engine := fs.String("engine", "", `the gateways' gateway.tunnel_engine, "epoll" or "goroutines" (default: wsgate's own)`)
	pollers := fs.Int("pollers", 0, "the gateways' gateway.pollers (default: wsgate's own)")
	protocol := fs.String("protocol", "", `the gateways' pools.protocol, "http1" or "h2" (default: wsgate's own)`)
	h2conns := fs.Int("h2-connections", 0, "the gateways' pools.h2_connections, HTTP/2 connections per relay with -protocol h2 (default: wsgate's own)")
	peers := fs.Bool("peers", false, "also start nginx and HAProxy in front of every relay, as make bench does (-up)")
	dir := fs.String("dir", "", "directory for logs, configs and raw reports (default: a new one in $TMPDIR)")
	var gwEnv []string
	fs.Func("gateway-env", "`KEY=value` added to the gateways' environment, such as GOGC=...; repeatable (-up; a GODEBUG here replaces the shipped "+shippedGODEBUG+")", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=value", v)
		}
		gwEnv = append(gwEnv, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *relays < 1 || *relays > 16 || *gateways < 1 || *gateways > 16 {
		fmt.Fprintln(stderr, "benchrun: -relays and -gateways must be 1-16")
		return 2
	}
	if *pollers < 0 || *pollers > 1024 {
		fmt.Fprintln(stderr, "benchrun: -pollers must be 0-1024")
		return 2
	}
	if *h2conns < 0 || *h2conns > 64 {
		fmt.Fprintln(stderr, "benchrun: -h2-connections must be 0-64")
		return 2
	}
	if *peers && !*up {
		fmt.Fprintln(stderr, "benchrun: -peers goes with -up")
		return 2
	}
	if len(gwEnv) > 0 && !*up {
		fmt.Fprintln(stderr, "benchrun: -gateway-env goes with -up")
		return 2
	}
	if err := execute(ctx, *dir, *quick, *smoke, *up, *peers, stack.Options{Relays: *relays, Gateways: *gateways, TunnelEngine: *engine, Pollers: *pollers, Protocol: *protocol, H2Connections: *h2conns, GatewayEnv: gwEnv}, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "benchrun:", err)
		return 1
	}
	return 0
}

// execute runs what the flags asked for; opt carries the stack's relay
// and gateway counts (-up only) and the gateways' tunnel engine and
// pollers; peers (-up only) starts nginx and HAProxy too.
func execute(ctx context.Context, dir string, quick, smoke, up, peers bool, opt stack.Options, stdout, stderr io.Writer) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "wsgate-bench-")
		if err != nil {
			return err
		}
		dir = d
	}
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	fmt.Fprintf(stderr, "benchrun: building into %s; logs and raw reports in %s\n", binDir, dir)
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	bins, err := stack.Build(ctx, root, binDir)
	if err != nil {
		return err
	}
	if !up {
		opt.Relays, opt.Gateways = 2, 1
		opt.OneCore = !smoke
		opt.H2 = !smoke
	}
	// The gateways run as the image and the systemd unit run them (-up
	// included, so bench/byhand.sh measures the gateway as it ships).
	opt.GatewayEnv = withShippedGODEBUG(opt.GatewayEnv)
	opt.Dir, opt.Bins = dir, bins
	st, err := stack.Up(opt)
	if st != nil {
		defer st.Close()
	}
	if err != nil {
		return err
	}
	r := &runner{dir: dir, bins: bins, st: st, plan: fullPlan, log: stderr}
	switch {
	case up:
		if peers {
			if err := startPeers(st); err != nil {
				return err
			}
		}
		return r.serve(ctx, stdout)
	case smoke:
		return r.smoke(ctx, stdout)
	}
	if quick {
		r.plan = quickPlan
	}
	if r.targets, err = targets(st, true, stderr); err != nil {
		return err
	}
	return r.bench(ctx, stdout)
}

// withShippedGODEBUG is env with shippedGODEBUG first, unless env sets
// GODEBUG itself.
func withShippedGODEBUG(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "GODEBUG=") {
			return env
		}
	}
	return append([]string{shippedGODEBUG}, env...)
}

func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run benchrun inside the wsgate module")
	}
	return filepath.Dir(mod), nil
}

// startPeers starts nginx and HAProxy in front of every relay of st, with
// the configs make bench gives them; a peer not installed is an error, as
// -peers asked for it.
func startPeers(st *stack.Stack) error {
	for _, kind := range []string{stack.Nginx, stack.HAProxy} {
		bin, err := stack.FindPeer(kind)
		if err != nil {
			return err
		}
		if _, err := st.StartPeer(kind, bin); err != nil {
			return err
		}
	}
	return nil
}

// serve prints the stack and waits for a signal; the caller stops it. A
// peer's line lists the PIDs whose CPU is the peer's, the one that
// proxies last (nginx: master, then worker; HAProxy: its one process).
func (r *runner) serve(ctx context.Context, w io.Writer) error {
	fmt.Fprintf(w, "redis       %s pid %d\n", r.st.RedisAddr, r.st.Redis.Pid())
	for _, rl := range r.st.Relays {
		fmt.Fprintf(w, "%-11s %s pid %d\n", rl.Name, rl.Addr, rl.Pid())
	}
	for _, g := range r.st.Gateways {
		fmt.Fprintf(w, "%-11s ws://%s admin http://%s pid %d config %s\n", g.Name, g.Addr, g.Admin, g.Pid(), g.Config)
	}
	for _, p := range r.st.Peers {
		pids, err := p.Pids()
		if err != nil {
			return err
		}
		ps := make([]string, len(pids))
		for i, pid := range pids {
			ps[i] = strconv.Itoa(pid)
		}
		fmt.Fprintf(w, "%-11s ws://%s pids %s config %s\n", p.Kind, p.Addr, strings.Join(ps, ","), p.Config)
	}
	fmt.Fprintf(w, "wsload      %s\nrelay-backend %s\nrunning; Ctrl-C (or SIGTERM to pid %d) stops everything\n", r.bins.WSLoad, r.bins.Relay, os.Getpid())
	<-ctx.Done()
	return nil
}
