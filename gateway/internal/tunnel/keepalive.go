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
	acked             uint64 // bytes the client's TCP stack had acknowledged at the last look after a ping
	pinged            bool   // a ping went out and nothing came since
	timer             atomic.Pointer[time.Timer]
}

// keepaliveTick looks at the client once: a client that sent a byte since
// the last look is alive; one that sent nothing gets a ping. After the
// ping, a client that took bytes since the last look (its TCP stack
// acknowledged some of what is queued toward it) is alive too: a slow
// reader of a stream finds the ping only behind the megabytes the socket
// buffers hold, and answers it once it gets there. One that neither sent
// nor took a byte since the last look is cut, also when the ping itself
// waits behind a write the client does not take; only a ping waiting for
// the end of a node frame, with nothing queued toward the client, is
// waited for. It returns when to look again, 0 for never (the tunnel is
// closing or the client was cut).
func (t *Tunnel) keepaliveTick() time.Duration {
	k := t.ka
	heard := t.toNode.bytes.Load()
	switch {
	case t.closeBy.Load() != 0:
		return 0 // closing: the close timeout bounds the rest
	case heard != k.heard:
		k.heard, k.pinged = heard, false
		return k.interval
	case k.pinged && t.clientTook():
		return k.timeout
	case k.pinged && t.toClient.pingWaitsForNode():
		// The ping waits for the end of a node frame in flight, with
		// nothing queued toward the client: it cannot have answered.
		return k.timeout
	case k.pinged:
		t.pongTimedOut()
		return 0
	default:
		k.pinged = true
		k.acked, _ = t.clientAcked()
		t.toClient.injectPing()
		return k.timeout
	}
}

// clientTook reports whether the client's TCP stack acknowledged a byte
// since the last look; false when that cannot be known (no TCP socket
// under the client's connection).
func (t *Tunnel) clientTook() bool {
	acked, ok := t.clientAcked()
	if !ok || acked == t.ka.acked {
		return false
	}
	t.ka.acked = acked
	return true
}

// pingWaitsForNode reports whether a keepalive ping waits for a frame
// boundary to dst while no write to dst is in flight: the node's frame
// has not ended, and dst has taken all it was given.
func (h *half) pingWaitsForNode() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pendingPing && !h.writing
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

// smallRead is the least a read of the client's socket that ends no frame
// costs of its rates: a read that brings fewer bytes than this and ends no
// frame is charged as smallRead bytes and one frame. The gateway's cost of
// a read hardly depends on its size, so a client dripping a frame one byte
// per TCP segment would otherwise cost it tens of times more per byte than
// whole frames while staying under both rates (issue 19 item 11; see
// docs/security.md). A read that ends a frame is charged what it brought:
// a client that writes whole frames is never charged more.
const smallRead = 64

// read charges one read of n bytes from the client that ended frames
// frames, at now, and reports whether both buckets held enough.
func (r *rateLimit) read(frames uint64, n int, now int64) bool {
	if frames == 0 && n < smallRead {
		frames, n = 1, smallRead
	}
	return r.take(frames, n, now)
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
