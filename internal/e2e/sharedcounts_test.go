package e2e

import (
	"fmt"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// sharedHealth is the pool of TestTwoGatewaysSharedCountsAfterRestart:
// fast probes, a short ejection, and counts shared on redisURL.
func sharedHealth(redisURL string) string {
	return fmt.Sprintf(`
[pools.health]
interval = "100ms"
timeout = "80ms"
rise = 2
fall = 2
eject_for = "500ms"
[pools.shared_counts]
redis = %q
interval = "100ms"
`, redisURL)
}

// TestTwoGatewaysSharedCountsAfterRestart is twogw's worst case (see
// docs/benchmarks.md) with [pools.shared_counts] on: two wsgate processes
// in front of three relays; gateway 1's 60 clients spread 20/20/20, relay
// 1 is killed and its 20 clients come back through gateway 1 onto relays
// 2 and 3 (0/30/30); relay 1 restarts, and 60 new clients arrive through
// gateway 2 only. Counting gateway 1's tunnels, gateway 2 refills relay 1,
// and the relays end within ±10% of their mean (gateway 2's own counts
// alone would give 20/50/50). At the end the relays hold nothing.
func TestTwoGatewaysSharedCountsAfterRestart(t *testing.T) {
	rs := redistest.Start(t)
	st1 := &stack{}
	startRelays(t, st1, 3, rs.URL())
	st2 := &stack{relays: st1.relays, relayAddr: st1.relayAddr}
	startGateway(t, st1, sharedHealth(rs.URL()), "") // gateway.id: HOST:PID
	startGateway(t, st2, sharedHealth(rs.URL()), "")
	gws := []*stack{st1, st2}
	open := make([][]*websocket.Conn, 2)
	defer func() {
		for _, cs := range open {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	// ended is closed when its client's connection ends: a reader per
	// client (nobody sends, so it reads only the end).
	ended := map[*websocket.Conn]chan struct{}{}
	dialN := func(g, n int) {
		t.Helper()
		for i := range n {
			c, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://%s/room/shared-%d", gws[g].gwAddr, i%10), nil)
			if err != nil {
				t.Fatalf("client %d via gateway %d: %v", i, g+1, err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					if _, _, err := c.ReadMessage(); err != nil {
						return
					}
				}
			}()
			ended[c] = done
			open[g] = append(open[g], c)
		}
	}

	dialN(0, 60)
	settledSplit(t, gws, open)

	// Relay 1 dies: its clients are gone (their sockets end); the same
	// number come back through gateway 1 once it has taken relay 1 out.
	if err := st1.relays[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = st1.relays[0].Wait(10 * time.Second)
	waitState(t, st1, st1.relayAddr[0], "down", "ejected")
	// Its 20 clients' tunnels end (close 1012 from gateway 1).
	deadline := time.Now().Add(30 * time.Second)
	for {
		kept := make([]*websocket.Conn, 0, len(open[0]))
		for _, c := range open[0] {
			select {
			case <-ended[c]:
			default:
				kept = append(kept, c)
			}
		}
		if len(kept) == 40 {
			for _, c := range open[0] {
				select {
				case <-ended[c]:
					c.Close()
				default:
				}
			}
			open[0] = kept
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of gateway 1's 60 clients still open 30s after relay 1 died, want 40", len(kept))
		}
		time.Sleep(20 * time.Millisecond)
	}
	dialN(0, 60-len(open[0]))
	waitTunnels(t, st1, 60) // all on relays 2 and 3: relay 1 is down
	waitExchanges(t, st1, 2)

	// Relay 1 comes back on its address; both gateways see it up and
	// gateway 2 has read gateway 1's counts after they settled.
	st1.relays[0] = testproc.Start(t, "relay-1b", testproc.Build(t, "./relay-backend"),
		"-listen", st1.relayAddr[0], "-id", "relay-1b", "-drain-window", "1s", "-redis", rs.URL())
	for _, st := range gws {
		waitState(t, st, st1.relayAddr[0], "up")
	}
	waitExchanges(t, st1, 2)
	waitExchanges(t, st2, 2)

	dialN(1, 60)
	split := settledSplit(t, gws, open)
	mean := float64(sum(split)) / float64(len(split))
	for i, n := range split {
		if math.Abs(float64(n)-mean) > 0.10*mean {
			t.Errorf("relay %d holds %d of %v, more than ±10%% from the mean %.1f", i+1, n, split, mean)
		}
	}
	t.Logf("after relay 1's restart and 60 clients through gateway 2: split %v", split)
	for g, cs := range open {
		for _, c := range cs {
			c.Close()
		}
		open[g] = nil
	}
	waitRelaysEmpty(t, st1)
}

// waitExchanges waits, at most 30s, until the gateway has made n more
// successful exchanges of shared counts than when called.
func waitExchanges(t *testing.T, st *stack, n float64) {
	t.Helper()
	const sample = `wsgate_shared_counts_exchanges_total{pool="relay",result="ok"}`
	from := metricValue(t, st.adminAddr, sample)
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, st.adminAddr, sample) < from+n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %v exchanges of shared counts in 30s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitTunnels waits, at most 30s, until the gateway holds n tunnels.
func waitTunnels(t *testing.T, st *stack, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for gatewayTunnels(t, st.adminAddr) != n {
		if time.Now().After(deadline) {
			t.Fatalf("gateway holds %d tunnels after 30s, want %d", gatewayTunnels(t, st.adminAddr), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
