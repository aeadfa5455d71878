//go:build linux

package tunnel

import (
	"testing"
	"time"
)

// TestPollersForgetEndedTunnels ends tunnels and checks that no poller
// still maps a descriptor to one of them: the poller's table returns to
// what it was, and a reused descriptor number can never reach an ended
// tunnel.
func TestPollersForgetEndedTunnels(t *testing.T) {
	if testEngine == EngineGoroutines {
		t.Skip("no pollers on the goroutine engine")
	}
	ended := map[*Tunnel]bool{}
	for range 20 {
		r := newRig(t, 0)
		if r.tun.pl == nil {
			t.Skip("the event-driven engine does not run here")
		}
		r.closeNormally()
		ended[r.tun] = true
	}
	for _, p := range pollers {
		found := make(chan int, 1)
		p.run(func() {
			n := 0
			for _, tun := range p.byFD {
				if ended[tun] {
					n++
				}
			}
			found <- n
		})
		select {
		case n := <-found:
			if n != 0 {
				t.Fatalf("a poller still maps %d descriptors to ended tunnels", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a poller did not run the check")
		}
	}
}

// TestPollersSweepEndedTunnelsTimers ends tunnels whose keepalive would
// look at them again only in an hour, and checks that the pollers' timer
// heaps do not keep them: a heap drops the entries of ended tunnels once
// sweepMin of its tunnels have ended, so at most that many ended tunnels
// (and not every one since the poller started) stay referenced.
func TestPollersSweepEndedTunnelsTimers(t *testing.T) {
	if testEngine == EngineGoroutines {
		t.Skip("no pollers on the goroutine engine")
	}
	ended := map[*Tunnel]bool{}
	n := 3 * sweepMin * max(len(pollers), 2)
	for range n {
		r := newRigWith(t, Params{PingInterval: time.Hour})
		if r.tun.pl == nil {
			t.Skip("the event-driven engine does not run here")
		}
		r.closeNormally()
		ended[r.tun] = true
	}
	total := 0
	for _, p := range pollers {
		found := make(chan int, 1)
		p.run(func() {
			n := 0
			for _, tm := range p.timers {
				if ended[tm.t] {
					n++
				}
			}
			found <- n
		})
		select {
		case k := <-found:
			// Each ended tunnel of the poller's holds at most two
			// entries (its keepalive and its close deadline).
			if k > 2*sweepMin {
				t.Fatalf("a poller's timer heap still holds %d entries of ended tunnels (of %d ended), want at most %d", k, n, 2*sweepMin)
			}
			total += k
		case <-time.After(10 * time.Second):
			t.Fatal("a poller did not run the check")
		}
	}
	t.Logf("%d timer entries of %d ended tunnels left", total, n)
}
