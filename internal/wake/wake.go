// Package wake is the one-slot wake-up the HTTP/2 streams of the gateway
// (gateway/internal/upstream/h2), those served to relay-backend's
// gateways and to the gateway's clients (internal/h2serve), and the
// gateway's NodeSockets (gateway/internal/tunnel), wait on:
// a channel of capacity one, signalled without blocking and waited on
// until a deadline. A signal sent while nobody waits is kept for the next
// wait, so a waiter that looks at its state, then waits, misses nothing
// signalled in between.
package wake

import (
	"os"
	"time"
)

// New returns a wake-up channel.
func New() chan struct{} { return make(chan struct{}, 1) }

// Signal wakes the goroutine waiting on ch, if any, or the next one to
// wait. It never blocks.
func Signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Wait waits for a signal on ch until the deadline dl (none if zero); it
// returns os.ErrDeadlineExceeded when dl passes first.
func Wait(ch chan struct{}, dl time.Time) error {
	if dl.IsZero() {
		<-ch
		return nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}
