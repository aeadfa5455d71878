package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/redistest"
)

// TestTwoGatewaysSplitEvenly runs two wsgate processes with the same config
// (least_conn, each counting only its own tunnels) on different ports in
// front of the same three relays on one redis-server, and gives both the
// same load: 90 clients each, opened by six concurrent dialers, then three
// rounds in which a random third of each gateway's clients leave and as many
// new ones arrive. After the opening and after every round, once both
// gateways and the relays agree on what is open, every relay holds within
// ±10% of the relays' mean (docs/benchmarks.md measures the asymmetric
// cases by hand with bench/cmd/twogw). At the end the relays hold nothing.
func TestTwoGatewaysSplitEvenly(t *testing.T) {
	rs := redistest.Start(t)
	st1 := &stack{}
	startRelays(t, st1, 3, rs.URL())
	st2 := &stack{relays: st1.relays, relayAddr: st1.relayAddr}
	startGateway(t, st1, "", "")
	startGateway(t, st2, "", "")
	gws := []*stack{st1, st2}

	const perGateway, dialers, rounds, leave = 90, 6, 3, 30
	rng := rand.New(rand.NewPCG(12, 34))
	open := make([][]*websocket.Conn, len(gws))
	defer func() {
		for _, cs := range open {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	next := 0
	// fill opens n clients through every gateway at once, dialers at a
	// time per gateway, rooms two-0 .. two-9.
	fill := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(gws)*n)
		got := make([][]*websocket.Conn, len(gws))
		for g, st := range gws {
			ids := make(chan int, n)
			for range n {
				ids <- next
				next++
			}
			close(ids)
			var mu sync.Mutex
			for range dialers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for id := range ids {
						url := fmt.Sprintf("ws://%s/room/two-%d", st.gwAddr, id%10)
						c, resp, err := websocket.DefaultDialer.Dial(url, nil)
						if err != nil {
							status := 0
							if resp != nil {
								status = resp.StatusCode
							}
							errs <- fmt.Errorf("client %d via gateway %d: %v (status %d)", id, g+1, err, status)
							continue
						}
						mu.Lock()
						got[g] = append(got[g], c)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for g := range gws {
			open[g] = append(open[g], got[g]...)
		}
		for err := range errs {
			t.Fatal(err)
		}
	}
	check := func(phase string) {
		t.Helper()
		split := settledSplit(t, gws, open)
		mean := float64(sum(split)) / float64(len(split))
		for i, n := range split {
			if math.Abs(float64(n)-mean) > 0.10*mean {
				t.Errorf("%s: relay %d holds %d of %v, more than ±10%% from the mean %.1f", phase, i+1, n, split, mean)
			}
		}
		t.Logf("%s: split %v", phase, split)
	}

	fill(perGateway)
	check("opened")
	for round := range rounds {
		for g := range gws {
			rng.Shuffle(len(open[g]), func(i, j int) { open[g][i], open[g][j] = open[g][j], open[g][i] })
			for _, c := range open[g][:leave] {
				_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				c.Close()
			}
			open[g] = open[g][leave:]
		}
		settledSplit(t, gws, open) // both gateways released what left
		fill(leave)
		check(fmt.Sprintf("round %d", round+1))
	}
	for g, cs := range open {
		for _, c := range cs {
			c.Close()
		}
		open[g] = nil
	}
	waitRelaysEmpty(t, st1)
}

// settledSplit waits, at most 30s, until every gateway's /api/nodes counts
// as many tunnels as it has clients open and the relays' /info connections
// add up to all of them, and returns the relays' connections.
func settledSplit(t *testing.T, gws []*stack, open [][]*websocket.Conn) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		want, ok := 0, true
		for g, st := range gws {
			want += len(open[g])
			ok = ok && gatewayTunnels(t, st.adminAddr) == len(open[g])
		}
		split := make([]int, len(gws[0].relayAddr))
		for i, a := range gws[0].relayAddr {
			split[i] = getInfo(t, a).Connections
		}
		if ok && sum(split) == want {
			return split
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after 30s: relays hold %v, want %d in all", split, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gatewayTunnels is the gateway's open tunnel count from /api/nodes.
func gatewayTunnels(t *testing.T, admin string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Tunnels int `json:"tunnels"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.Tunnels
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
