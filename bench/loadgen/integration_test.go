package loadgen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startRelays starts n in-process relays on one memory bus and returns
// them with their addresses.
func startRelays(t *testing.T, n int) ([]*relay.Relay, []string) {
	t.Helper()
	mem := bus.NewMemory()
	var rs []*relay.Relay
	var addrs []string
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r := relay.New(relay.Options{ID: fmt.Sprintf("relay-%d", i), Bus: mem.Endpoint(), Logger: quiet(), DrainWindow: 200 * time.Millisecond})
		go func() { _ = r.Serve(ln) }()
		rs = append(rs, r)
		addrs = append(addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		for _, r := range rs {
			_ = r.Close(context.Background())
		}
		_ = mem.Close()
	})
	return rs, addrs
}

// startGateway starts an in-process gateway in front of addrs.
func startGateway(t *testing.T, addrs []string) string {
	t.Helper()
	cfg := fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "200ms"
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %q
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/"
pool = "relay"
`, addrs[0], addrs[1])
	c, err := conf.Parse("test.toml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv.Addr().String()
}

// waitRelaysEmpty waits until the relays hold no connection: everything
// wsload opened was closed.
func waitRelaysEmpty(t *testing.T, rs []*relay.Relay) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for _, r := range rs {
			n += r.Info().Connections
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays still hold %d connections", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runOK(t *testing.T, c Config) *Report {
	t.Helper()
	c.Seed = 42
	c.Log = tlog{t}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run(%s): %v", c.Scenario, err)
	}
	// A healthy run meets its scenario's target.
	checked := *r
	checked.ApplyThresholds(TargetChecks(c.Scenario, nil))
	if !checked.Passed || r.Target == 0 {
		t.Fatalf("Run(%s) missed its target %d: %+v", c.Scenario, r.Target, checked.Thresholds)
	}
	return r
}

func TestScenarios(t *testing.T) {
	rs, addrs := startRelays(t, 2)
	gw := startGateway(t, addrs)
	targets := map[string]string{"relay": addrs[0], "gateway": gw}
	for _, via := range []string{"relay", "gateway"} {
		url := "ws://" + targets[via] + "/room/lg%d"
		t.Run(via+"/idle", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "idle", URL: url, N: 200, Rate: 2000, Hold: 300 * time.Millisecond, Ping: 100 * time.Millisecond, Rooms: 20})
			if r.Connected != 200 || r.Held != 200 || r.Dropped != 0 || r.Failed != 0 {
				t.Fatalf("connected %d held %d dropped %d failed %v", r.Connected, r.Held, r.Dropped, r.FailedBy)
			}
			if r.Connect.Count != 200 || r.P95 <= 0 {
				t.Errorf("connect latency %+v", r.Connect)
			}
			waitRelaysEmpty(t, rs)
		})
		t.Run(via+"/churn", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "churn", URL: url, Concurrency: 4, Duration: 500 * time.Millisecond})
			if r.Received == 0 || r.Received != r.Expected || r.Failed != 0 || r.RoundTrip.Count != r.Received {
				t.Fatalf("round trips %d of %d, failed %v", r.Received, r.Expected, r.FailedBy)
			}
			if r.HandshakesPerSec <= 0 {
				t.Errorf("handshakes per second %v", r.HandshakesPerSec)
			}
			waitRelaysEmpty(t, rs)
		})
		t.Run(via+"/fanout", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "fanout", URL: url, Rooms: 4, Members: 3, MsgRate: 20, Size: 64, Duration: 500 * time.Millisecond})
			if r.Sent == 0 || r.Expected != 2*r.Sent || r.Delivered != 100 || r.Duplicates != 0 || r.OutOfOrder != 0 {
				t.Fatalf("sent %d expected %d received %d dup %d ooo %d", r.Sent, r.Expected, r.Received, r.Duplicates, r.OutOfOrder)
			}
			if r.Latency.Count != r.Received {
				t.Errorf("latency observations %d, received %d", r.Latency.Count, r.Received)
			}
			waitRelaysEmpty(t, rs)
		})
		t.Run(via+"/reconnect-storm", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "reconnect-storm", URL: url, N: 100, Rate: 2000, After: 50 * time.Millisecond, Window: 200 * time.Millisecond, Rooms: 10})
			if r.Back != 100 || r.NotBack != 0 || r.Tries < 100 || r.Reconnect.Count != 100 || r.BackAllMS <= 0 {
				t.Fatalf("back %d not back %d tries %d reconnect %+v", r.Back, r.NotBack, r.Tries, r.Reconnect)
			}
			waitRelaysEmpty(t, rs)
		})
	}
}

// TestIdleCountsDrops closes the relay under held connections: each must
// be counted as dropped with the code the relay (1001, drain) or the
// gateway (1012, node vanished) sent.
func TestIdleCountsDrops(t *testing.T) {
	rs, addrs := startRelays(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *Report, 1)
	go func() {
		r, _ := Run(ctx, Config{Scenario: "idle", URL: "ws://" + addrs[0] + "/room/d", N: 20, Rate: 1000, Hold: 10 * time.Second, Seed: 1})
		done <- r
	}()
	deadline := time.Now().Add(10 * time.Second)
	for rs[0].Info().Connections < 20 {
		if time.Now().After(deadline) {
			t.Fatal("clients did not connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	_ = rs[0].Drain(dctx)
	waitRelaysEmpty(t, rs)
	cancel()
	r := <-done
	if r.Dropped != 20 || r.DroppedBy["1001"] != 20 || r.Held != 0 {
		t.Fatalf("dropped %d by %v, held %d", r.Dropped, r.DroppedBy, r.Held)
	}
}

func TestDialFailures(t *testing.T) {
	_, addrs := startRelays(t, 1)
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()
	tests := []struct {
		name   string
		url    string
		reason string
	}{
		{"refused", "ws://" + free + "/room/x", ReasonDial},
		{"not found", "ws://" + addrs[0] + "/nope", "http_404"},
		{"bad room", "ws://" + addrs[0] + "/room/", "http_400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := ParseTarget(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			d := Dialer{Timeout: 2 * time.Second}
			c, err := d.Dial(context.Background(), tg)
			if err == nil {
				c.Abort()
				t.Fatal("dial succeeded")
			}
			if got := Reason(err); got != tt.reason {
				t.Errorf("reason %q (%v), want %q", got, err, tt.reason)
			}
		})
	}
}

func TestAcceptKey(t *testing.T) {
	// The example of RFC 6455 section 1.3.
	if got := acceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("acceptKey = %s", got)
	}
}

func TestDialFromSources(t *testing.T) {
	rs, addrs := startRelays(t, 1)
	src, err := ParseSources("127.0.0.2-127.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := ParseTarget("ws://" + addrs[0] + "/room/src")
	d := Dialer{Sources: src, Timeout: 2 * time.Second}
	seen := map[string]bool{}
	for range 6 {
		c, err := d.Dial(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		seen[c.LocalAddr().(*net.TCPAddr).IP.String()] = true
		c.Close(1000, time.Second)
		if code, _ := c.ReadLoop(func(_ wsframe.Opcode, _ []byte) {}); code != 1000 {
			t.Errorf("close answered with %d", code)
		}
	}
	if len(seen) != 3 {
		t.Errorf("dialled from %v, want 3 addresses", seen)
	}
	waitRelaysEmpty(t, rs)
}

// tlog sends progress lines to the test log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
