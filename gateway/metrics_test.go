package gateway

import (
	"runtime"
	"testing"

	"github.com/fasthttp/websocket"
)

// TestBuildInfoMetric pins that the gateway says which build runs (it did
// not): wsgate_build_info{version,revision,goversion} 1.
func TestBuildInfoMetric(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	ms := e.scrape()["wsgate_build_info"].GetMetric()
	if len(ms) != 1 || ms[0].GetGauge().GetValue() != 1 {
		t.Fatalf("wsgate_build_info = %v, want one series of value 1", ms)
	}
	labels := map[string]string{}
	for _, l := range ms[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["goversion"] != runtime.Version() || labels["version"] == "" || labels["revision"] == "" || len(labels) != 3 {
		t.Fatalf("labels %v, want version, revision and goversion=%s", labels, runtime.Version())
	}
}

// TestTunnelEngineMetric checks that a plain tunnel runs on the event-driven
// engine unless gateway.tunnel_engine says goroutines, and that the metric
// says which ran.
func TestTunnelEngineMetric(t *testing.T) {
	for _, c := range []struct{ key, want, other string }{
		{"", "epoll", "goroutines"},
		{`tunnel_engine = "goroutines"`, "goroutines", "epoll"},
	} {
		t.Run(c.want, func(t *testing.T) {
			e := newEnv(t, 1, oneNodeWith(c.key, "", ""))
			conn := e.mustDial("/room/engine")
			if err := conn.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			starts := e.srv.metrics.TunnelStarts
			waitUntil(t, func() bool { return counterValue(t, starts.WithLabelValues(c.want)) == 1 })
			if n := counterValue(t, starts.WithLabelValues(c.other)); n != 0 {
				t.Errorf("%s tunnels started: %v, want 0", c.other, n)
			}
			conn.Close()
			e.waitZero()
		})
	}
}
