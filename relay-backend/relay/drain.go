package relay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Drain stops the relay gracefully: /healthz answers 503 "draining", new
// upgrades get 503, every HTTP/2 connection gets GOAWAY (its open streams
// go on, it takes no new one and closes once they have ended), and every
// connected client gets close 1001 ("going away"), client i of N at
// i*DrainWindow/N so they do not all reconnect at once. It then waits for them to disconnect. If ctx ends first, the
// remaining connections are cut and ctx's error is returned. Drain does not
// stop the listener; call Close for that.
func (r *Relay) Drain(ctx context.Context) error {
	r.mu.Lock()
	r.draining.Store(true)
	r.mu.Unlock()
	r.h2.GoAway()
	r.mu.Lock()
	list := make([]*member, 0, len(r.members))
	for _, m := range r.members {
		list = append(list, m)
	}
	var drained chan struct{}
	if len(list) > 0 {
		if r.drained == nil {
			r.drained = make(chan struct{})
		}
		drained = r.drained
	}
	r.mu.Unlock()
	if drained == nil {
		return nil
	}
	slices.SortFunc(list, func(a, b *member) int { return cmp.Compare(a.id, b.id) })
	r.log.Info("draining", "connections", len(list), "window", r.opt.DrainWindow)

	start := time.Now()
	n := time.Duration(len(list))
	var t *time.Timer
	for i, m := range list {
		if d := time.Until(start.Add(time.Duration(i) * r.opt.DrainWindow / n)); d > 0 {
			if t == nil {
				t = time.NewTimer(d)
				defer t.Stop()
			} else {
				t.Reset(d)
			}
			select {
			case <-t.C:
			case <-drained:
				return nil
			case <-ctx.Done():
				return r.cut(ctx, list)
			}
		}
		m.kick(closeGoingAway, "going away")
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return r.cut(ctx, list)
	}
}

// cut closes the connections still open when a drain ran out of time.
func (r *Relay) cut(ctx context.Context, list []*member) error {
	left := 0
	for _, m := range list {
		select {
		case <-m.done:
		default:
			left++
			m.cut()
		}
	}
	r.log.Warn("drain deadline reached, closed remaining connections", "closed", left)
	return fmt.Errorf("drain: %w", ctx.Err())
}
