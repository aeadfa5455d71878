package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/bench/loadgen"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/rebalance"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// rebalanceConf is a gateway in front of the relays at nodes, with
// rebalance (a [pools.rebalance] table, or "") in its pool.
const rebalanceConf = `
[gateway]
listen = %q
drain_window = "1s"
drain_timeout = "10s"
[admin]
listen = %q
[[pools]]
name = "relay"
  [pools.health]
  interval = "500ms"
  timeout = "400ms"
  rise = 1
%s
%s
[[routes]]
path_prefix = "/room/"
pool = "relay"
`

// writeRebalanceConf writes the config for relays addrs to path.
func writeRebalanceConf(t *testing.T, path, gw, admin, rebalance string, addrs []string) {
	t.Helper()
	var nodes strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&nodes, "  [[pools.nodes]]\n  addr = %q\n", a)
	}
	if err := os.WriteFile(path, fmt.Appendf(nil, rebalanceConf, gw, admin, rebalance, nodes.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRebalanceConvergesAfterNodeJoins runs 300 relay.v1 clients (30
// rooms of 10, each writing twice a second) through the gateway on two
// relay-backend processes sharing a redis-server, then reloads a config
// with a third relay. The rebalancer must bring the three within ±5% of
// the average, by closing with 1001 no more tunnels than it takes (100,
// give or take what a node over its share by less than the tolerance
// keeps), while no handshake fails, every client comes back, and no
// acknowledged write is lost and no offset is repeated or missing in any
// connection's stream.
// Health probes get 400 ms: a node that flaps down under a loaded
// machine's -race run sends moved clients elsewhere.
func TestRebalanceConvergesAfterNodeJoins(t *testing.T) {
	const rooms, members = 30, 10
	const clients = rooms * members
	rds := redistest.Start(t)
	bin := testproc.Build(t, "./relay-backend")
	var addrs []string
	for i := range 3 {
		addr := testproc.FreeAddr(t)
		testproc.Start(t, fmt.Sprintf("relay-%d", i+1), bin, "-listen", addr, "-id", fmt.Sprintf("relay-%d", i+1), "-redis", rds.URL())
		addrs = append(addrs, addr)
	}
	for _, a := range addrs {
		testproc.WaitHTTP(t, "http://"+a+"/healthz", http.StatusOK, 30*time.Second)
	}

	gwAddr, adminAddr := testproc.FreeAddr(t), testproc.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	table := "  [pools.rebalance]\n  tolerance = 0.05\n  rate = 50\n"
	writeRebalanceConf(t, path, gwAddr, adminAddr, table, addrs[:2])
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs testproc.Buffer
	srv, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	// The file the reload reads: the third relay joins.
	writeRebalanceConf(t, path, gwAddr, adminAddr, table, addrs)

	// Watch the nodes' live counts until the run ends: converged once all
	// clients are back and each node is within 5% of the average.
	stop := make(chan struct{})
	var watch sync.WaitGroup
	var converged bool
	var lives []int
	watch.Add(1)
	go func() {
		defer watch.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p := srv.current().pools["relay"]
			ls, total := []int{}, 0
			for _, n := range p.Balancer.Nodes() {
				ls = append(ls, n.Live())
				total += n.Live()
			}
			lives = ls
			if len(ls) == 3 && total == clients && within(ls, 0.05) {
				// Stop moving: the clients' own closes at the end of
				// the run would start another round.
				srv.rebal.Stop()
				converged = true
				return
			}
		}
	}()

	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		Scenario: "drain",
		URL:      "ws://" + gwAddr + "/room/rb%d",
		Rooms:    rooms,
		Members:  members,
		MsgRate:  2,
		Size:     64,
		Rate:     1000,
		After:    500 * time.Millisecond,
		Duration: 12 * time.Second,
		Window:   time.Second,
		GiveUp:   30 * time.Second,
		DrainURL: "http://" + adminAddr + "/api/reload",
		Seed:     7,
		Dialer:   loadgen.Dialer{Timeout: 10 * time.Second},
	})
	close(stop)
	watch.Wait()
	if err != nil {
		t.Fatal(err)
	}
	moves := movesOf(t, srv, addrs[0]) + movesOf(t, srv, addrs[1])
	t.Logf("lives %v converged %v; moves %v; report: connected %d failed %v dropped %v close codes %v back %d not back %d acked %d resent %d lost %d gaps %d",
		lives, converged, moves, rep.Connected, rep.FailedBy, rep.DroppedBy, rep.CloseCodes, rep.Back, rep.NotBack, rep.Acked, rep.Resent, rep.LostWrites, rep.Gaps)
	if !converged {
		t.Errorf("the nodes never came within 5%% of the average with every client back: last %v", lives)
	}
	if rep.Failed != 0 || rep.NotBack != 0 {
		t.Errorf("failed handshakes %v, clients not back %d", rep.FailedBy, rep.NotBack)
	}
	if rep.LostWrites != 0 || rep.DupOffsets != 0 || rep.Gaps != 0 {
		t.Errorf("lost writes %d, repeated offsets %d, gaps %d", rep.LostWrites, rep.DupOffsets, rep.Gaps)
	}
	// Every move is a 1001 a client saw, and nothing else closed one.
	if got := rep.CloseCodes["1001"]; float64(got) != moves || len(rep.CloseCodes) != 1 {
		t.Errorf("close codes %v, moves %v", rep.CloseCodes, moves)
	}
	// 100 reach the average; a node within 5% of it gives no more.
	if moves < 90 || moves > 100 {
		t.Errorf("moves %v, want 90..100", moves)
	}
	if n := srv.current().pools["relay"].Node(addrs[2]); n == nil || n.State() != balancer.StateUp {
		t.Errorf("third node not up: %v", n)
	}
}

// within reports whether every count is within tol of their average.
func within(counts []int, tol float64) bool {
	total := 0
	for _, c := range counts {
		total += c
	}
	avg := float64(total) / float64(len(counts))
	for _, c := range counts {
		if d := float64(c) - avg; d > tol*avg || -d > tol*avg {
			return false
		}
	}
	return true
}

// movesOf reads wsgate_rebalance_moves_total of node addr in pool relay.
func movesOf(t *testing.T, srv *Server, addr string) float64 {
	t.Helper()
	var m dto.Metric
	if err := srv.metrics.RebalanceMoves.WithLabelValues("relay", addr).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// capConf is two nodes, the second capped at %[4]d, rebalanced at 100
// moves a second with a 10% tolerance.
const capConf = `
[gateway]
listen = %[1]q
drain_window = "200ms"
drain_timeout = "5s"
[admin]
listen = ""
[[pools]]
name = "relay"
  [pools.health]
  interval = "50ms"
  timeout = "40ms"
  rise = 1
  [pools.rebalance]
  tolerance = 0.1
  rate = 100
  [[pools.nodes]]
  addr = %[2]q
  [[pools.nodes]]
  addr = %[3]q
  max_conns = %[4]d
[[routes]]
path_prefix = "/room/"
pool = "relay"
`

// TestRebalanceStopsAtCap holds 40 clients on node A while B is drained
// (nothing moves: B takes nobody), then lets B (capped at 5) take
// connections: the rebalancer moves 5
// clients, with 1001, and no more however long it runs, since B has no
// room left. A reload that raises B's cap to 50 and drops
// [pools.rebalance] moves nobody; one that puts the table back moves 15
// more, to 20 and 20. The test drives the rebalancer's ticks itself, a tick's
// time apart on a clock of its own.
func TestRebalanceStopsAtCap(t *testing.T) {
	e := newEnv(t, 2, strings.Replace(capConf, "%[4]d", "5", 1))
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	const table = "  [pools.rebalance]\n  tolerance = 0.1\n  rate = 100\n"
	write := func(cap int, on bool) {
		c := strings.Replace(capConf, "%[4]d", fmt.Sprint(cap), 1)
		if !on {
			c = strings.Replace(c, table, "", 1)
		}
		e.writeConfig(path, c)
	}
	write(5, true)
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	rb, p, a, b := stopForTicks(t, e)

	// Clients that come back after a 1001, and count what closed them.
	var goaways, others atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 40 {
		c, _, err := e.dial(fmt.Sprintf("/room/cap%d", i%4), nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_, _, err := c.ReadMessage()
				for err == nil {
					_, _, err = c.ReadMessage()
				}
				c.Close()
				var ce *websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
					select {
					case <-done:
					default:
						others.Add(1)
					}
					return
				}
				goaways.Add(1)
				if c, _, err = e.dial(fmt.Sprintf("/room/cap%d", i%4), nil); err != nil {
					others.Add(1)
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(done)
		e.srv.tunnels.AbortAll()
		wg.Wait()
	})
	waitRebalance(t, "40 clients on A", func() bool { return a.Live() == 40 })
	ticks, moved := driveRebalancer(t, e.srv, rb, e.addrs[0])
	// B draining takes nobody: nothing moves.
	ticks(20)
	if m := moved(); m != 0 || a.Live() != 40 {
		t.Fatalf("B draining: moves %v, A holds %d; want 0 and 40", m, a.Live())
	}
	e.srv.undrainNode(p, b)
	waitRebalance(t, "B up", func() bool { return b.State() == balancer.StateUp })

	ticks(1)
	waitRebalance(t, "35 on A and 5 on B", func() bool { return a.Live() == 35 && b.Live() == 5 })
	ticks(20)
	if m := moved(); m != 5 || goaways.Load() != 5 || a.Live() != 35 || b.Live() != 5 {
		t.Fatalf("B at its cap: moves %v, 1001s %d, lives %d %d; want 5, 5, 35 and 5", m, goaways.Load(), a.Live(), b.Live())
	}

	// Without the table nothing moves, however far apart the nodes are.
	write(50, false)
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	ticks(20)
	if m := moved(); m != 5 || rb.Tracked() != 0 || a.Live() != 35 {
		t.Fatalf("rebalance off: moves %v, pools tracked %d, A holds %d; want 5, 0, 35", m, rb.Tracked(), a.Live())
	}

	write(50, true)
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	ticks(1)
	waitRebalance(t, "20 on A and 20 on B", func() bool {
		ticks(1)
		return a.Live() == 20 && b.Live() == 20
	})
	ticks(20)
	if m := moved(); m != 20 || goaways.Load() != 20 || others.Load() != 0 {
		t.Fatalf("after the cap rose: moves %v, 1001s %d, other ends %d; want 20, 20, 0", m, goaways.Load(), others.Load())
	}
}

// stopForTicks stops e's rebalancer loop so that the test runs its ticks,
// waits until e's two nodes A and B are up, and drains B: it takes no
// client until the test undrains it.
func stopForTicks(t *testing.T, e *env) (rb *rebalance.Rebalancer, p *upstream.Pool, a, b *balancer.Node) {
	t.Helper()
	rb = e.srv.rebal
	rb.Stop()
	e.srv.rebal = nil
	p = e.srv.current().pools["relay"]
	a, b = p.Node(e.addrs[0]), p.Node(e.addrs[1])
	waitRebalance(t, "both nodes up", func() bool { return a.State() == balancer.StateUp && b.State() == balancer.StateUp })
	e.srv.drainNode(p, b, false)
	return rb, p, a, b
}

// driveRebalancer returns a function that runs n ticks of rb, a tick
// apart on a clock of the test's own, and one that reads srv's moves off
// node addr.
func driveRebalancer(t *testing.T, srv *Server, rb *rebalance.Rebalancer, addr string) (ticks func(n int), moved func() float64) {
	now := time.Now()
	ticks = func(n int) {
		for range n {
			now = now.Add(rebalance.TickInterval)
			rb.Tick(now)
		}
	}
	return ticks, func() float64 { return movesOf(t, srv, addr) }
}

// waitRebalance polls cond until it holds, failing the test after 10 seconds.
func waitRebalance(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRebalancerStopsAtShutdown checks that Shutdown ends the
// rebalancer's goroutine before its drain, and that a second stop is
// harmless.
func TestRebalancerStopsAtShutdown(t *testing.T) {
	e := newEnv(t, 2, strings.Replace(capConf, "%[4]d", "5", 1))
	rb := e.srv.rebal
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rb.Done():
	default:
		t.Fatal("the rebalancer still runs after Shutdown")
	}
	rb.Stop()
}

// TestRebalanceReloadKeepsSettle moves 20 of 40 clients off node A to an
// empty node B; the clients never come back. Reloads in the settle wait
// that follows must not plan a new round from the counts of a pool whose
// moved clients are still away: nothing more moves until the wait ends.
func TestRebalanceReloadKeepsSettle(t *testing.T) {
	e := newEnv(t, 2, strings.Replace(capConf, "%[4]d", "50", 1))
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	e.writeConfig(path, strings.Replace(capConf, "%[4]d", "50", 1))
	rb, p, a, b := stopForTicks(t, e)
	var wg sync.WaitGroup
	for i := range 40 {
		c, _, err := e.dial(fmt.Sprintf("/room/gone%d", i%4), nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { // reads until the end, and does not come back
			defer wg.Done()
			for err == nil {
				_, _, err = c.ReadMessage()
			}
			c.Close()
		}()
	}
	t.Cleanup(func() {
		e.srv.tunnels.AbortAll()
		wg.Wait()
	})
	waitRebalance(t, "40 clients on A", func() bool { return a.Live() == 40 })
	e.srv.undrainNode(p, b)
	waitRebalance(t, "B up", func() bool { return b.State() == balancer.StateUp })
	ticks, moved := driveRebalancer(t, e.srv, rb, e.addrs[0])
	ticks(5)
	waitRebalance(t, "20 moved off A", func() bool { return moved() == 20 && a.Live() == 20 })
	for range 3 { // reloads every tick or so, well within rebalance.SettleTimeout
		if err := e.srv.ReloadFrom(path); err != nil {
			t.Fatal(err)
		}
		ticks(5)
	}
	if m := moved(); m != 20 || a.Live() != 20 {
		t.Fatalf("after reloads in the settle wait: moves %v, A holds %d; want 20 and 20", m, a.Live())
	}
	ticks(int(rebalance.SettleTimeout / rebalance.TickInterval))
	waitRebalance(t, "the next round after the settle wait", func() bool { ticks(1); return moved() == 30 })
}
