package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// tunnelGoAwayCode is the close code of a planned drain (going away).
const tunnelGoAwayCode = tunnel.CodeGoingAway

// registry holds every live tunnel, so a drain reaches all of them. A
// tunnel added while a drain runs is told to go away at once.
type registry struct {
	mu       sync.Mutex
	live     map[*tunnel.Tunnel]struct{}
	draining bool
	empty    chan struct{} // made by wait, closed when live becomes empty
}

func (r *registry) add(t *tunnel.Tunnel) {
	r.mu.Lock()
	if r.live == nil {
		r.live = make(map[*tunnel.Tunnel]struct{})
	}
	r.live[t] = struct{}{}
	draining := r.draining
	r.mu.Unlock()
	if draining {
		go t.GoAway(tunnelGoAwayCode, "gateway shutting down")
	}
}

func (r *registry) remove(t *tunnel.Tunnel) {
	r.mu.Lock()
	delete(r.live, t)
	if len(r.live) == 0 && r.empty != nil {
		close(r.empty)
		r.empty = nil
	}
	r.mu.Unlock()
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

func (r *registry) snapshot() []*tunnel.Tunnel {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([]*tunnel.Tunnel, 0, len(r.live))
	for t := range r.live {
		ts = append(ts, t)
	}
	return ts
}

// drain tells every live tunnel to go away, tunnel i of n at i*window/n, so
// clients reconnect elsewhere in a trickle rather than a storm. It returns
// the number of tunnels told; it stops early when ctx ends.
func (r *registry) drain(ctx context.Context, window time.Duration, code uint16, reason string) int {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	ts := r.snapshot()
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, t := range ts {
		at := start.Add(window * time.Duration(i) / time.Duration(len(ts)))
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return i
			}
		}
		go t.GoAway(code, reason)
	}
	return len(ts)
}

// wait blocks until no tunnel is left or ctx ends, and returns how many are
// left.
func (r *registry) wait(ctx context.Context) int {
	r.mu.Lock()
	if len(r.live) == 0 {
		r.mu.Unlock()
		return 0
	}
	if r.empty == nil {
		r.empty = make(chan struct{})
	}
	empty := r.empty
	r.mu.Unlock()
	select {
	case <-empty:
		return 0
	case <-ctx.Done():
		return r.len()
	}
}

func (r *registry) abortAll() {
	for _, t := range r.snapshot() {
		t.Abort()
	}
}
