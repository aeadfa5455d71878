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
