package gateway

import (
	"runtime"
	"testing"
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
