//go:build linux

package tunnel

import (
	"testing"
	"time"
)

// TestPollerRunsAfterClockStepBack: the poller's timers were wall-clock
// Unix ns, its wake-up the runtime's (monotonic) read deadline on the
// epoll descriptor. When the wall clock stepped back after a deadline was
// armed, the deadline passed while the next timer was not due by the wall
// clock; armTimer saw the same next timer and did not re-arm, so every
// Read failed at once and ready (events, the queue) never ran until the
// wall clock caught up: the poller spun and its tunnels stalled. Timers
// are monotonic now, and an expired deadline is always armed again; the
// state is set up here as it was right after such a step of 8s.
func TestPollerRunsAfterClockStepBack(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Skip("no epoll:", err)
	}
	dead := &Tunnel{clientFD: -1} // its timer fires as a no-op
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
