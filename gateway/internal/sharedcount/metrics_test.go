package sharedcount

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSharerObserverEnded pins the gauges of a pool that stops sharing: a
// sharer told to stop may finish an exchange in flight, and its report
// recreated the gauges just deleted, left at their last value for a pool
// that no longer shares. An ended observer drops it; one ended for a
// restart keeps the gauges for the sharer that takes over.
func TestSharerObserverEnded(t *testing.T) {
	sm := newMetrics(nil)
	series := func() int {
		ch := make(chan prometheus.Metric, 16)
		sm.peers.Collect(ch)
		sm.fallback.Collect(ch)
		close(ch)
		return len(ch)
	}
	obs := &observer{m: sm}
	obs.Exchanged("relay", true, 2)
	obs.Fallback("relay", false)
	if n := series(); n != 2 {
		t.Fatalf("%d gauge series while sharing, want 2", n)
	}
	obs.end("relay", true)
	obs.Exchanged("relay", true, 3) // an exchange that was in flight
	obs.Fallback("relay", true)
	if n := series(); n != 0 {
		t.Fatalf("%d gauge series after the pool stopped sharing, want 0", n)
	}
	restarted := &observer{m: sm}
	restarted.Exchanged("relay", true, 1)
	restarted.end("relay", false)
	if n := series(); n != 1 {
		t.Fatalf("%d gauge series after a restart's end, want the peers gauge kept", n)
	}
}
