package telemetry

import (
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/health"
)

// fakeLive is a gateway with fixed pools, tunnels and connections.
type fakeLive struct {
	tunnels int
	totals  tunnel.Stats
	pools   map[string][]*balancer.Node
	open    int64
	limit   int64
	h2      []int // the open and closing HTTP/2 connections to relay's node
}

func (f *fakeLive) LiveTunnels() int           { return f.tunnels }
func (f *fakeLive) TunnelTotals() tunnel.Stats { return f.totals }
func (f *fakeLive) OpenConns() int64           { return f.open }
func (f *fakeLive) ConnLimit() int64           { return f.limit }

func (f *fakeLive) EachH2(fn func(pool, node string, open, closing int)) {
	if f.h2 != nil {
		fn("relay", "10.0.0.1:80", f.h2[0], f.h2[1])
	}
}

func (f *fakeLive) EachNode(fn func(pool string, n *balancer.Node)) {
	names := make([]string, 0, len(f.pools))
	for name := range f.pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, n := range f.pools[name] {
			fn(name, n)
		}
	}
}

// gather returns the value of each series of m's registry, keyed by
// family{label=value,...} with the labels in the registry's order.
func gather(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			var v float64
			switch {
			case s.GetCounter() != nil:
				v = s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				v = s.GetGauge().GetValue()
			case s.GetHistogram() != nil:
				v = float64(s.GetHistogram().GetSampleCount())
			}
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// TestLiveCollector checks that a scrape reads the live tunnels, the
// pools' nodes (connections, cap, one state set to 1), the frame and byte
// totals and the client connections from the gateway at scrape time.
func TestLiveCollector(t *testing.T) {
	a, b := balancer.NewNode("10.0.0.1:80", 1, 5), balancer.NewNode("10.0.0.2:80", 1, 0)
	b.SetState(balancer.StateDraining)
	if _, ok := a.TryAcquire(); !ok {
		t.Fatal("no lease on a fresh node")
	}
	live := &fakeLive{
		tunnels: 3,
		totals:  tunnel.Stats{FramesToNode: 10, FramesToClient: 20, BytesToNode: 100, BytesToClient: 200},
		pools:   map[string][]*balancer.Node{"relay": {a}, "chat": {b}},
		open:    7,
		limit:   1000,
		h2:      []int{2, 1},
	}
	got := gather(t, NewMetrics(live))
	want := map[string]float64{
		"wsgate_tunnels{}": 3,
		"wsgate_connections{node=10.0.0.1:80,pool=relay}":                           1,
		"wsgate_connections{node=10.0.0.2:80,pool=chat}":                            0,
		"wsgate_node_max_connections{node=10.0.0.1:80,pool=relay}":                  5,
		"wsgate_node_max_connections{node=10.0.0.2:80,pool=chat}":                   0,
		"wsgate_node_state{node=10.0.0.1:80,pool=relay,state=up}":                   1,
		"wsgate_node_state{node=10.0.0.1:80,pool=relay,state=draining}":             0,
		"wsgate_node_state{node=10.0.0.2:80,pool=chat,state=draining}":              1,
		"wsgate_node_state{node=10.0.0.2:80,pool=chat,state=up}":                    0,
		"wsgate_upstream_h2_connections{node=10.0.0.1:80,pool=relay,state=open}":    2,
		"wsgate_upstream_h2_connections{node=10.0.0.1:80,pool=relay,state=closing}": 1,
		"wsgate_frames_total{direction=to_node}":                                    10,
		"wsgate_frames_total{direction=to_client}":                                  20,
		"wsgate_bytes_total{direction=to_node}":                                     100,
		"wsgate_bytes_total{direction=to_client}":                                   200,
		"wsgate_client_connections{}":                                               7,
		"wsgate_client_connections_limit{}":                                         1000,
		"wsgate_config_generation{}":                                                1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	states := 0
	for k := range got {
		if strings.HasPrefix(k, "wsgate_node_state{") {
			states++
		}
	}
	if want := 2 * len(nodeStates); states != want {
		t.Errorf("%d wsgate_node_state series, want %d (every state of each node)", states, want)
	}
}

// TestHandshakeCounts checks that HandshakeCounts reads every result,
// counted or not, and that Handshake also times the handshake.
func TestHandshakeCounts(t *testing.T) {
	m := NewMetrics(&fakeLive{})
	m.Handshake("ok", time.Now())
	m.Handshake("ok", time.Now())
	m.Handshake("origin", time.Now())
	c := m.HandshakeCounts()
	if len(c) != len(handshakeResults) || c["ok"] != 2 || c["origin"] != 1 || c["auth_denied"] != 0 {
		t.Errorf("HandshakeCounts() = %v, want ok 2, origin 1 and every other result 0", c)
	}
	if n := gather(t, m)["wsgate_handshake_duration_seconds{result=ok}"]; n != 2 {
		t.Errorf("%v ok handshakes timed, want 2", n)
	}
}

// TestTunnelEnded checks that a tunnel's end counts its reason and each
// side's close code, codes folded by codeLabel.
func TestTunnelEnded(t *testing.T) {
	m := NewMetrics(&fakeLive{})
	m.TunnelEnded(tunnel.Stats{End: tunnel.EndClosed, ClientCloseCode: 1000, NodeCloseCode: 4001, GatewayToNodeCode: 1001})
	got := gather(t, m)
	for k, v := range map[string]float64{
		"wsgate_tunnels_closed_total{reason=closed}":          1,
		"wsgate_tunnels_closed_total{reason=client_gone}":     0,
		"wsgate_closes_total{code=1000,side=client}":          1,
		"wsgate_closes_total{code=4xxx,side=node}":            1,
		"wsgate_closes_total{code=1001,side=gateway_to_node}": 1,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if strings.Contains(k, "side=gateway_to_client") {
			t.Errorf("%s counted: the gateway sent no close to the client", k)
		}
	}
}

// TestCodeLabel checks that close codes fold into a bounded set of labels.
func TestCodeLabel(t *testing.T) {
	for _, c := range []struct {
		code uint16
		want string
	}{
		{999, "other"}, {1000, "1000"}, {1008, "1008"}, {1015, "1015"}, {1016, "other"},
		{2999, "other"}, {3000, "3xxx"}, {3999, "3xxx"}, {4000, "4xxx"}, {4999, "4xxx"}, {5000, "other"},
	} {
		if got := codeLabel(c.code); got != c.want {
			t.Errorf("codeLabel(%d) = %q, want %q", c.code, got, c.want)
		}
	}
}

// TestForgetNode checks that ForgetNode drops every series of one node
// of one pool and leaves the others', and ForgetPool the pool's probe
// latency.
func TestForgetNode(t *testing.T) {
	m := NewMetrics(&fakeLive{})
	for _, node := range []string{"a:1", "b:1"} {
		o := m.ProbeObserver("relay")
		o.ProbeDone(node, true, time.Millisecond)
		o.StateChanged(node, health.StateUp, health.StateDown)
		m.LocalDialErrors.WithLabelValues("relay", node, "no_source_port").Inc()
		m.RebalanceMoves.WithLabelValues("relay", node).Inc()
	}
	m.ForgetNode("relay", "a:1")
	byNode := map[string]int{}
	for k := range gather(t, m) {
		for _, node := range []string{"a:1", "b:1"} {
			if strings.Contains(k, "node="+node+",") || strings.Contains(k, "node="+node+"}") {
				byNode[node]++
			}
		}
	}
	if byNode["a:1"] != 0 || byNode["b:1"] != 4 {
		t.Errorf("series by node after forgetting a:1: %v, want none of a:1 and 4 of b:1", byNode)
	}
	if n := gather(t, m)["wsgate_health_check_duration_seconds{pool=relay}"]; n != 2 {
		t.Errorf("%v probes timed in relay, want 2", n)
	}
	m.ForgetPool("relay")
	if _, ok := gather(t, m)["wsgate_health_check_duration_seconds{pool=relay}"]; ok {
		t.Error("relay's probe latency left after ForgetPool")
	}
}

// TestPluginObserver checks that a plugin decision is counted by outcome
// and cache, and timed only when the plugin was called.
func TestPluginObserver(t *testing.T) {
	m := NewMetrics(&fakeLive{})
	o := m.PluginObserver()
	o.Observe("jwt", 0, false, time.Millisecond)
	o.Observe("jwt", 0, true, 0)
	var d dto.Metric
	if err := m.PluginSeconds.WithLabelValues("jwt").(interface{ Write(*dto.Metric) error }).Write(&d); err != nil {
		t.Fatal(err)
	}
	if n := d.GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("%d plugin calls timed, want 1 (the cached decision is not)", n)
	}
	calls := 0.0
	for k, v := range gather(t, m) {
		if strings.HasPrefix(k, "wsgate_plugin_calls_total{") {
			calls += v
		}
	}
	if calls != 2 {
		t.Errorf("%v plugin decisions counted, want 2", calls)
	}
}
