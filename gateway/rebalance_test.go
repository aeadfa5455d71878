package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/loadgen"
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
  interval = "100ms"
  timeout = "80ms"
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
// acknowledged write is lost.
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
	srv, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
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
			for _, n := range p.bal.Nodes() {
				ls = append(ls, n.Live())
				total += n.Live()
			}
			lives = ls
			if len(ls) == 3 && total == clients && within(ls, 0.05) {
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
	if rep.LostWrites != 0 || rep.Gaps != 0 || rep.DupOffsets != 0 {
		t.Errorf("lost writes %d, gaps %d, repeated offsets %d", rep.LostWrites, rep.Gaps, rep.DupOffsets)
	}
	// Every move is a 1001 a client saw, and nothing else closed one.
	if got := rep.CloseCodes["1001"]; float64(got) != moves || len(rep.CloseCodes) != 1 {
		t.Errorf("close codes %v, moves %v", rep.CloseCodes, moves)
	}
	// 100 reach the average; a node within 5% of it gives no more.
	if moves < 90 || moves > 100 {
		t.Errorf("moves %v, want 90..100", moves)
	}
	if n := srv.current().pools["relay"].node(addrs[2]); n == nil || n.State() != balancer.StateUp {
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
	if err := srv.rebal.moves.WithLabelValues("relay", addr).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
