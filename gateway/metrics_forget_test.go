package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/discovery/dnstest"
)

// nodeSeries returns, for each scraped series with a node label, the
// family and the labels, keyed by the node's address.
func nodeSeries(fams map[string]*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var node string
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
				if l.GetName() == "node" {
					node = l.GetValue()
				}
			}
			if node != "" {
				out[node] = append(out[node], name+"{"+strings.Join(ls, ",")+"}")
			}
		}
	}
	return out
}

// waitScrape scrapes until cond holds of the series by node, for at most
// 10s, and returns the last scrape's.
func (e *env) waitScrape(what string, cond func(map[string][]string) bool) map[string][]string {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := nodeSeries(e.scrape())
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within 10s; series by node: %v", what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forgetBase is a pool of three nodes probed every 50ms, with a short
// handshake timeout (how long a removed node is held for a handshake
// that read the previous config).
const forgetBase = `
[gateway]
listen = %[1]q
handshake_timeout = "1s"
drain_window = "1s"
drain_timeout = "5s"
[admin]
listen = "127.0.0.1:0"
[[pools]]
name = "relay"
  [pools.health]
  interval = "50ms"
  timeout = "40ms"
  rise = 1
  [[pools.nodes]]
  addr = %[2]q
  [[pools.nodes]]
  addr = %[3]q
  [[pools.nodes]]
  addr = %[4]q
[[routes]]
path_prefix = "/room/"
pool = "relay"
`

// TestRemovedNodeSeriesDeleted pins issue 19 item 10: the series of a
// node a reload removed (health checks, transitions, local dial errors,
// rebalance moves) stayed in /metrics for the life of the process. They
// stay while the node still has a tunnel, even swept past the handshake
// timeout, and go once its last tunnel ends.
func TestRemovedNodeSeriesDeleted(t *testing.T) {
	e, path := reloadable(t, 3, forgetBase)
	gone := e.addrs[2]
	e.waitScrape("probes of the third node", func(s map[string][]string) bool {
		for _, x := range s[gone] {
			if strings.HasPrefix(x, "wsgate_health_checks_total{") {
				return true
			}
		}
		return false
	})
	// The other vectors move only on rarer events: count one each.
	e.srv.metrics.ProbeObserver("relay").StateChanged(gone, health.StateUp, health.StateDown)
	e.srv.countDialError("relay", gone, "no_source_port")
	e.srv.metrics.RebalanceMoves.WithLabelValues("relay", gone).Inc()
	for _, f := range []string{"wsgate_node_transitions_total", "wsgate_upstream_local_dial_errors_total", "wsgate_rebalance_moves_total"} {
		if fam := e.scrape()[f]; fam == nil || len(fam.GetMetric()) == 0 {
			t.Fatalf("no %s series", f)
		}
	}

	// A tunnel to the node that outlives the reload.
	var held *websocket.Conn
	for i := 0; held == nil; i++ {
		if i == 30 {
			t.Fatal("no client reached relay-3 in 30 tries")
		}
		c, replica := e.helloReplica(fmt.Sprintf("/room/f%d", i))
		if replica == "relay-3" {
			held = c
			continue
		}
		defer c.Close()
	}
	// The counters by node; the gauges of the pool's nodes (connections,
	// state) leave with the node from the pool.
	counted := func() int {
		n := 0
		for _, x := range nodeSeries(e.scrape())[gone] {
			if strings.Contains(x, "_total{") {
				n++
			}
		}
		return n
	}
	before := counted()
	node := e.srv.current().pools["relay"].Node(gone)
	if node == nil || node.Live() == 0 {
		t.Fatal("no lease on the third node before the reload")
	}

	e.writeConfig(path, strings.Replace(forgetBase, "  [[pools.nodes]]\n  addr = %[4]q\n", "", 1))
	if err := e.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if e.srv.current().pools["relay"].Node(gone) != nil {
		t.Fatal("the reload left the node in its pool")
	}
	// Past the handshake timeout no handshake can take a lease on the
	// node any more, so only its live tunnel keeps it: the client has not
	// answered the gateway's close. Moving the reload's time back stands
	// for the wait, which a sweep inside it would not test.
	e.srv.reload.mu.Lock()
	e.srv.reload.goneAt = time.Now().Add(-time.Hour)
	e.srv.reload.mu.Unlock()
	e.srv.sweepNodes()
	// Live only falls on a drained node: still held after the sweep, it
	// was held through it.
	if node.Live() == 0 {
		t.Fatal("the tunnel to the removed node ended before the sweep was checked")
	}
	if got := counted(); got != before {
		t.Fatalf("removed node with a live tunnel, swept past the handshake timeout: %d series, want %d", got, before)
	}
	expectClose(t, held, 1001)
	held.Close()
	left := e.waitScrape("the removed node's series deleted", func(s map[string][]string) bool { return len(s[gone]) == 0 })
	for _, a := range e.addrs[:2] {
		if len(left[a]) == 0 {
			t.Errorf("node %s still in the pool lost its series", a)
		}
	}
}

// TestDiscoveryChurnSeriesBounded pins issue 19 item 10 under discovery:
// a name whose A record moves through 20 addresses left 20 nodes' series
// behind; now, once the watcher has let the missing ones go
// (discovery's misses), only the node found last has any.
func TestDiscoveryChurnSeriesBounded(t *testing.T) {
	_, port := sharedPortListeners(t, 1)
	dns := dnstest.Start(t)
	dns.SetA("relays.wsgate.test", "127.0.0.2")
	cfg := strings.Replace(fmt.Sprintf(dnsDiscoveryCfg, port, dns.Addr), "drain_window", "handshake_timeout = \"1s\"\ndrain_window", 1)
	srv := startGateway(t, cfg)
	e := &env{t: t, srv: srv, gw: srv.Addr().String()}
	const rounds = 20
	for i := range rounds {
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		dns.SetA("relays.wsgate.test", ip)
		addr := fmt.Sprintf("%s:%d", ip, port)
		// Nothing listens there: its probes fail and it is counted.
		e.waitScrape("probes of "+addr, func(s map[string][]string) bool { return len(s[addr]) > 0 })
	}
	last := fmt.Sprintf("127.0.0.%d:%d", 10+rounds-1, port)
	e.waitScrape("only the last node's series", func(s map[string][]string) bool {
		return len(s) == 1 && len(s[last]) > 0
	})
}
