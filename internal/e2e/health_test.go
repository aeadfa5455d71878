package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// fastHealth makes the gateway probe every 100ms, down after 3 failures,
// up after 2 passes.
const fastHealth = `
[pools.health]
interval = "100ms"
timeout = "80ms"
rise = 2
fall = 3
`

// nodeStates reads each node's state from the gateway's /api/nodes.
func nodeStates(t *testing.T, st *stack) (map[string]string, int) {
	t.Helper()
	resp, err := http.Get("http://" + st.adminAddr + "/api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Tunnels int `json:"tunnels"`
		Pools   []struct {
			Nodes []struct {
				Addr  string `json:"addr"`
				State string `json:"state"`
			} `json:"nodes"`
		} `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range v.Pools {
		for _, n := range p.Nodes {
			out[n.Addr] = n.State
		}
	}
	return out, v.Tunnels
}

// waitState polls until node addr is in one of states.
func waitState(t *testing.T, st *stack, addr string, states ...string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	for {
		got, _ := nodeStates(t, st)
		for _, s := range states {
			if got[addr] == s {
				return time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %q, want one of %v", addr, got[addr], states)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStoppedRelayGoesDownAndComesBack freezes one relay with SIGSTOP: the
// gateway marks it down after fall failed probes and sends new clients to
// the other, while the frozen relay's tunnels stay open; SIGCONT brings it
// back after rise passes.
func TestStoppedRelayGoesDownAndComesBack(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 2, "")
	startGateway(t, st, fastHealth, "")
	var before []*client
	for i := range 10 {
		before = append(before, dial(t, st.gwAddr, i, fmt.Sprintf("s%d", i)))
	}
	frozen := st.relays[0]
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer frozen.Signal(syscall.SIGCONT)
	took := waitState(t, st, st.relayAddr[0], "down")
	t.Logf("down after %v", took)
	if _, tunnels := nodeStates(t, st); tunnels != len(before) {
		t.Fatalf("tunnels %d after the node went down, want the %d open before", tunnels, len(before))
	}
	for i := range 6 {
		c := dial(t, st.gwAddr, 100+i, "fresh")
		if c.replica != "relay-2" {
			t.Fatalf("new client served by %s while relay-1 is down", c.replica)
		}
		c.conn.Close()
	}
	if err := frozen.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	took = waitState(t, st, st.relayAddr[0], "up")
	t.Logf("up after %v", took)
	// The frozen relay's clients were never cut: they still talk.
	for _, c := range before {
		if err := c.conn.WriteMessage(1, []byte("ping")); err != nil {
			t.Fatalf("client %d on %s lost its tunnel: %v", c.id, c.replica, err)
		}
		c.conn.Close()
	}
}

// TestRelaySIGTERMMarksDraining sends SIGTERM to one relay: the gateway
// marks it draining (or drained, or down once it exits) within a probe or
// two, and every new client goes to the other relay.
func TestRelaySIGTERMMarksDraining(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 2, "")
	startGateway(t, st, fastHealth, "")
	c := dial(t, st.gwAddr, 0, "t")
	if err := st.relays[0].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took := waitState(t, st, st.relayAddr[0], "draining", "drained", "down")
	t.Logf("marked after %v (probe interval 100ms)", took)
	for i := range 10 {
		n := dial(t, st.gwAddr, 10+i, "t")
		if n.replica != "relay-2" {
			t.Fatalf("new client %d served by %s after relay-1 started draining", i, n.replica)
		}
		n.conn.Close()
	}
	c.conn.Close()
}

// TestMetricsMatchRelayInfo scrapes the gateway process's /metrics with the
// Prometheus text parser after a load: the per-node connection gauge equals
// each relay's own /info count.
func TestMetricsMatchRelayInfo(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 2, "")
	startGateway(t, st, "", "")
	var cs []*client
	for i := range 41 {
		cs = append(cs, dial(t, st.gwAddr, i, fmt.Sprintf("m%d", i%4)))
	}
	resp, err := http.Get("http://" + st.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	gauge := map[string]float64{}
	for _, m := range fams["wsgate_connections"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "node" {
				gauge[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for _, a := range st.relayAddr {
		if info := getInfo(t, a); float64(info.Connections) != gauge[a] {
			t.Errorf("node %s: gauge %v, relay /info %d", a, gauge[a], info.Connections)
		}
	}
	if !strings.Contains(fmt.Sprint(gauge), "21") {
		t.Errorf("41 clients over two nodes should split 21/20: %v", gauge)
	}
	for _, c := range cs {
		c.conn.Close()
	}
}
