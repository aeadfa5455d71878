package stack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
)

// TestUpAndClose starts redis, one relay and one gateway as real processes,
// checks each answers and the gateway reaches the relay, then checks Close
// leaves none of them running.
func TestUpAndClose(t *testing.T) {
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
	dir := t.TempDir()
	bins, err := Build(context.Background(), root, dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Up(Options{Dir: dir, Bins: bins, Relays: 1, Gateways: 1})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
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

	procs := []*Proc{s.Redis, s.Relays[0].Proc, s.Gateways[0].Proc}
	s.Close()
	closed = true
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-time.After(time.Second):
			t.Fatalf("%s (pid %d) still running after Close", p.Name, p.Pid())
		}
		if err := syscall.Kill(p.Pid(), 0); err == nil {
			t.Fatalf("%s (pid %d) still exists after Close", p.Name, p.Pid())
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
