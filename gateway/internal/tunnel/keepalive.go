package tunnel

import (
	"os"
	"sync/atomic"
	"time"
)

// keepalive is a tunnel's ping state. Its fields are used by one timer at a
// time: the poller's on the event-driven engine, an AfterFunc's on
// goroutines.
type keepalive struct {
	interval, timeout time.Duration
	heard             uint64 // bytes read from the client at the last look
	pinged            bool   // a ping went out at the last look and nothing came since
	timer             atomic.Pointer[time.Timer]
}

// keepaliveTick looks at the client once: a client that sent a byte since
// the last look is alive; one that sent nothing gets a ping, and one that
// sent nothing since the ping is cut. It returns when to look again, 0 for
// never (the tunnel is closing or the client was cut).
func (t *Tunnel) keepaliveTick() time.Duration {
	k := t.ka
	heard := t.toNode.bytes.Load()
	switch {
	case t.closeBy.Load() != 0:
		return 0 // closing: the close timeout bounds the rest
	case heard != k.heard:
		k.heard, k.pinged = heard, false
		return k.interval
	case k.pinged && t.toClient.pingPending():
		// The ping waits for the end of a frame in flight: the client
		// cannot have answered it yet.
		return k.timeout
	case k.pinged:
		t.pongTimedOut()
		return 0
	default:
		k.pinged = true
		t.toClient.injectPing()
		return k.timeout
	}
}

// pingPending reports whether a keepalive ping is waiting for a frame
// boundary to dst.
func (h *half) pingPending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pendingPing
}

// pongTimedOut cuts a client that did not answer a ping: reading it stops
// as on a read deadline, so the node gets close 1001 and the tunnel ends
// once the node answers, as when a client vanishes.
func (t *Tunnel) pongTimedOut() {
	t.setReason(EndPongTimeout)
	if t.pl != nil {
		t.toNode.endSrc(os.ErrDeadlineExceeded)
		return
	}
	_ = t.client.SetReadDeadline(time.Unix(1, 0))
}

// startKeepalive starts the goroutine engine's keepalive timer.
func (t *Tunnel) startKeepalive() {
	k := t.ka
	if k == nil {
		return
	}
	tick := func() {
		if next := t.keepaliveTick(); next > 0 {
			k.timer.Load().Reset(next)
		}
	}
	tm := time.AfterFunc(time.Hour, tick)
	k.timer.Store(tm)
	tm.Reset(k.interval)
}

// stopKeepalive stops the goroutine engine's keepalive timer; a tick
// already running finds the tunnel closing and stops by itself.
func (t *Tunnel) stopKeepalive() {
	if t.ka == nil {
		return
	}
	if tm := t.ka.timer.Load(); tm != nil {
		tm.Stop()
	}
}

// rateLimit is a client's frame and byte token buckets, each holding one
// second's worth. It is used by the client→node half's forward only.
type rateLimit struct {
	frameRate, byteRate float64 // per second; 0 = no cap
	frames, bytes       float64 // tokens left
	last                int64   // Unix ns of the last take
}

func newRateLimit(frameRate, byteRate uint64) *rateLimit {
	return &rateLimit{
		frameRate: float64(frameRate), byteRate: float64(byteRate),
		frames: float64(frameRate), bytes: float64(byteRate),
		last: time.Now().UnixNano(),
	}
}

// take spends frames and n bytes at now and reports whether both buckets
// held enough.
func (r *rateLimit) take(frames uint64, n int, now int64) bool {
	dt := max(0, float64(now-r.last)/1e9)
	r.last = now
	ok := true
	if r.frameRate > 0 {
		r.frames = min(r.frameRate, r.frames+dt*r.frameRate) - float64(frames)
		ok = r.frames >= 0
	}
	if r.byteRate > 0 {
		r.bytes = min(r.byteRate, r.bytes+dt*r.byteRate) - float64(n)
		ok = ok && r.bytes >= 0
	}
	return ok
}
