//go:build linux

package tunnel

import (
	"testing"
	"time"
)

// TestPollerRunsAfterClockStepBack: the poller's timers are wall-clock
// Unix ns, its wake-up the runtime's (monotonic) read deadline on the
// epoll descriptor. When the wall clock steps back after a deadline was
// armed, the deadline passes while the next timer is not due yet by the
// wall clock; armTimer sees the same next timer and does not re-arm, so
// every Read fails at once with the deadline exceeded and ready (events,
// the queue) never runs until the wall clock catches up: the poller spins
// and its tunnels stall. The state is set up here as it is right after
// such a step of 8s.
func TestPollerRunsAfterClockStepBack(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Skip("no epoll:", err)
	}
	dead := &Tunnel{fdsClosed: true} // its timer fires as a no-op
	p.after(time.Now().Add(8*time.Second), dead, timerKeepalive)
	p.armed = p.timers[0].when
	// The runtime's deadline for p.armed has passed (the monotonic
	// clock got there) while the wall clock was set back.
	_ = p.epfile.SetReadDeadline(time.Now().Add(-time.Millisecond))
	go p.loop()
	ran := make(chan struct{})
	p.run(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(3 * time.Second):
		t.Fatal("the poller ran nothing queued while its timer was not due by the wall clock: it spins on an expired deadline")
	}
}
