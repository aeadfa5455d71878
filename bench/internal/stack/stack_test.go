package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
)

// upStack builds the binaries and starts a stack of real processes with
// opt (Dir and Bins filled in), closed when the test ends (Close may have
// run already: it is idempotent). Without redis-server the test is
// skipped, or fails in CI.
func upStack(t *testing.T, opt Options) *Stack {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not installed (CI must install it)")
		}
		t.Skip("redis-server not installed")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	opt.Dir = t.TempDir()
	if opt.Bins, err = Build(context.Background(), root, opt.Dir); err != nil {
		t.Fatal(err)
	}
	s, err := Up(opt)
	if s != nil {
		t.Cleanup(s.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestUpAndClose starts redis, one relay and one gateway as real processes,
// and nginx and HAProxy in front of the relay when they are installed,
// checks each answers and each proxy reaches the relay, then checks Close
// leaves none of them running, nginx's worker included.
func TestUpAndClose(t *testing.T) {
	s := upStack(t, Options{Relays: 1, Gateways: 1, OneCore: true, GatewayEnv: []string{"WSGATE_STACK_TEST=1"}})
	if len(s.Relays) != 1 || len(s.Gateways) != 1 || s.Redis == nil {
		t.Fatalf("stack has %d relays, %d gateways, redis %v", len(s.Relays), len(s.Gateways), s.Redis)
	}
	info, err := s.Relays[0].Info()
	if err != nil || info.Replica != "relay-1" {
		t.Fatalf("relay info = %+v, %v", info, err)
	}
	// Plain HTTP through the gateway is proxied to the relay.
	body, err := httpGet("http://" + s.Gateways[0].Addr + "/info")
	if err != nil || !strings.Contains(string(body), `"relay-1"`) {
		t.Fatalf("gateway /info = %q, %v", body, err)
	}
	m, err := s.Gateways[0].Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := probe.SumCounter(m, "wsgate_frames_total"); err != nil {
		t.Fatalf("gateway metrics: %v", err)
	}
	if err := s.Gateways[0].Post("/api/pools/relay/nodes/nope/drain"); err == nil {
		t.Fatal("drain of an unknown node succeeded")
	}

	// The gateway held to one core proxies too, with GOMAXPROCS=1 in its
	// environment and one poller in its config.
	one := s.OneCore
	if one == nil {
		t.Fatal("no one-core gateway")
	}
	if body, err := httpGet("http://" + one.Addr + "/info"); err != nil || !strings.Contains(string(body), `"relay-1"`) {
		t.Fatalf("one-core gateway /info = %q, %v", body, err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", one.Pid()))
	if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
		t.Fatalf("one-core gateway's environment lacks GOMAXPROCS=1 (%v)", err)
	}
	// Options.GatewayEnv reaches both gateways.
	for _, g := range []*Gateway{s.Gateways[0], one} {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", g.Pid()))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "WSGATE_STACK_TEST=1") {
			t.Fatalf("%s's environment lacks WSGATE_STACK_TEST=1 (%v)", g.Name, err)
		}
	}
	if cfg, err := os.ReadFile(one.Config); err != nil || !strings.Contains(string(cfg), "pollers = 1\n") {
		t.Fatalf("one-core gateway's config:\n%s (%v)", cfg, err)
	}

	procs := []*Proc{s.Redis, s.Relays[0].Proc, s.Gateways[0].Proc, one.Proc}
	var pids []int
	for _, kind := range []string{Nginx, HAProxy} {
		bin, err := FindPeer(kind)
		if errors.Is(err, ErrPeerMissing) {
			t.Logf("%s is not installed; not started: %v", kind, err)
			continue
		}
		peer, err := s.StartPeer(kind, bin)
		if err != nil {
			t.Fatal(err)
		}
		body, err := httpGet("http://" + peer.Addr + "/info")
		if err != nil || !strings.Contains(string(body), `"relay-1"`) {
			t.Fatalf("%s /info = %q, %v", kind, body, err)
		}
		ps, err := peer.Pids()
		want := map[string]int{Nginx: 2, HAProxy: 1}[kind] // nginx: master and one worker
		if err != nil || len(ps) != want {
			t.Fatalf("%s pids = %v, %v; want %d", kind, ps, err, want)
		}
		procs = append(procs, peer.Proc)
		pids = append(pids, ps...)
	}
	s.Close()
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-time.After(time.Second):
			t.Fatalf("%s (pid %d) still running after Close", p.Name, p.Pid())
		}
		pids = append(pids, p.Pid())
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Fatalf("pid %d still exists after Close", pid)
		}
	}
}

func TestGatewayConfigListsEveryRelay(t *testing.T) {
	s := &Stack{opt: Options{DrainWindow: 2 * time.Second}, Relays: []*Relay{{Addr: "127.0.0.1:7001"}, {Addr: "127.0.0.1:7002"}}}
	cfg := s.GatewayConfig("127.0.0.1:8080", "127.0.0.1:9090")
	for _, want := range []string{`listen = "127.0.0.1:8080"`, `listen = "127.0.0.1:9090"`, `addr = "127.0.0.1:7001"`, `addr = "127.0.0.1:7002"`, `drain_window = "2s"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %s:\n%s", want, cfg)
		}
	}
}

func TestStopAndWait(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		stop bool
	}{
		{"exits by itself", []string{"-c", "exit 3"}, false},
		{"ignores SIGTERM", []string{"-c", "trap '' TERM; exec sleep 30"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(tc.name, filepath.Join(dir, "log"), "/bin/sh", tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stop {
				p.Stop(100 * time.Millisecond)
				if _, err := p.Wait(time.Second); err != nil {
					t.Fatalf("after Stop: %v", err)
				}
				return
			}
			code, err := p.Wait(10 * time.Second)
			if err != nil || code != 3 {
				t.Fatalf("Wait = %d, %v; want 3", code, err)
			}
			p.Stop(time.Second) // no-op on an exited process
		})
	}
}

// TestPeerConfigsAccepted writes the nginx and HAProxy configs the runner
// uses and runs each peer's own check on them (nginx -t, haproxy -c). CI
// does not install the peers, so there it skips; `make bench` installs
// them.
func TestPeerConfigsAccepted(t *testing.T) {
	for _, kind := range []string{Nginx, HAProxy} {
		t.Run(kind, func(t *testing.T) {
			bin, err := FindPeer(kind)
			if errors.Is(err, ErrPeerMissing) {
				t.Skipf("%s is not installed, so its config is not checked: %v", kind, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := PeerCheck(kind, bin, t.TempDir())
			if err != nil {
				t.Fatalf("config refused: %v\n%s", err, out)
			}
			// A warning means a directive did not take effect as written
			// (a limit lowered, a directive ignored).
			if strings.Contains(strings.ToLower(out), "warn") {
				t.Fatalf("config accepted with a warning:\n%s", out)
			}
		})
	}
}

func TestPeerConfigs(t *testing.T) {
	relays := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	ngx := NginxConfig("/tmp/x", "127.0.0.1:8080", relays, true)
	for _, want := range []string{"user root;", "worker_processes 1;", "worker_connections 20000;", "worker_rlimit_nofile 20000;",
		"daemon off;", "least_conn;", "server 127.0.0.1:7001;", "server 127.0.0.1:7002;", "listen 127.0.0.1:8080;",
		"proxy_http_version 1.1;", "proxy_set_header Upgrade $http_upgrade;", "proxy_read_timeout 1h;", "proxy_send_timeout 1h;",
		"access_log off;", "pid /tmp/x/nginx.pid;", "error_log /tmp/x/nginx-error.log"} {
		if !strings.Contains(ngx, want) {
			t.Errorf("nginx config lacks %q:\n%s", want, ngx)
		}
	}
	if strings.Contains(NginxConfig("/tmp/x", "127.0.0.1:8080", relays, false), "user ") {
		t.Error("nginx config names a user when not run as root")
	}
	hap := HAProxyConfig("127.0.0.1:8080", relays)
	for _, want := range []string{"nbthread 1", "maxconn 9900", "mode http", "balance leastconn", "timeout tunnel 1h",
		"timeout client", "timeout server", "timeout connect", "bind 127.0.0.1:8080", "server relay-1 127.0.0.1:7001 check inter 1s", "server relay-2 127.0.0.1:7002 check inter 1s",
		"retries 3", "option redispatch"} {
		if !strings.Contains(hap, want) {
			t.Errorf("haproxy config lacks %q:\n%s", want, hap)
		}
	}
}

// TestRestartRelayAndReconfigure runs a real stack: relay 1 is killed
// with SIGKILL and restarted on its address under its name, relay 2 is
// restarted while running (stopped by its PID first), and the gateway
// takes a config with [pools.admission] through Reconfigure's reload;
// Close then leaves none of the processes, old or new, running.
func TestRestartRelayAndReconfigure(t *testing.T) {
	s := upStack(t, Options{Relays: 2, Gateways: 1})
	old := []*Relay{s.Relays[0], s.Relays[1]}
	if err := old[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("relay-1 still running 10s after SIGKILL")
	}
	for i, id := range []string{"relay-1", "relay-2"} {
		r, err := s.RestartRelay(id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Addr != old[i].Addr || r.Pid() == old[i].Pid() || s.Relays[i] != r || len(s.Relays) != 2 {
			t.Fatalf("%s restarted on %s pid %d (was %s pid %d); relays %v", id, r.Addr, r.Pid(), old[i].Addr, old[i].Pid(), s.Relays)
		}
		select {
		case <-old[i].Done():
		default:
			t.Fatalf("%s's old process (pid %d) still runs", id, old[i].Pid())
		}
		if info, err := r.Info(); err != nil || info.Replica != id {
			t.Fatalf("restarted %s: info %+v, %v", id, info, err)
		}
	}
	if _, err := s.RestartRelay("relay-9"); err == nil {
		t.Fatal("restart of an unknown relay succeeded")
	}

	g := s.Gateways[0]
	orig, err := os.ReadFile(g.Config)
	if err != nil {
		t.Fatal(err)
	}
	text, err := WithAdmission(string(orig), 250, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Reconfigure(text); err != nil {
		t.Fatalf("the gateway refused the admission config: %v\n%s", err, text)
	}
	if err := g.Reconfigure(strings.Replace(text, "burst = 100", "burst = -1", 1)); err == nil {
		t.Fatal("the gateway took a negative burst")
	}
	if err := g.Reconfigure(string(orig)); err != nil {
		t.Fatal(err)
	}

	procs := []*Proc{s.Redis, g.Proc, old[0].Proc, old[1].Proc, s.Relays[0].Proc, s.Relays[1].Proc}
	s.Close()
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-time.After(time.Second):
			t.Fatalf("%s (pid %d) still running after Close", p.Name, p.Pid())
		}
	}
}

func TestWithAdmission(t *testing.T) {
	s := &Stack{opt: Options{DrainWindow: 2 * time.Second}, Relays: []*Relay{{Addr: "127.0.0.1:7001"}, {Addr: "127.0.0.1:7002"}}}
	cfg := s.GatewayConfig("127.0.0.1:8080", "127.0.0.1:9090")
	got, err := WithAdmission(cfg, 250, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := "  [pools.admission]\n  rate = 250\n  burst = 100\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7002\"\n"
	if !strings.Contains(got, want) || strings.Count(got, "[pools.admission]") != 1 {
		t.Fatalf("config with admission:\n%s\nwant it to contain:\n%s", got, want)
	}
	tests := []struct {
		name        string
		cfg         string
		rate, burst int
	}{
		{"twice", got, 250, 100},
		{"no nodes", "[gateway]\n", 250, 100},
		{"negative rate", cfg, -1, 0},
		{"negative burst", cfg, 1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := WithAdmission(tc.cfg, tc.rate, tc.burst); err == nil {
				t.Fatalf("WithAdmission succeeded:\n%s", out)
			}
		})
	}
}
