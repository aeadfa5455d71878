package tunnel

import (
	"sync/atomic"
	"time"
)

// keepalive is a tunnel's ping state. Its plain fields are used by one
// timer at a time: the poller's on the event-driven engine, an
// AfterFunc's on goroutines. The ping's place in the client's socket is
// set by the writer of the node→client half.
type keepalive struct {
	interval, timeout time.Duration
	heard             uint64 // bytes read from the client at the last look
	acked             uint64 // bytes the client's TCP stack had acknowledged at the last look
	pingAt            int64  // mono ns: when the ping was asked for; 0: none since the client was last heard
	// pingEnd and pingLen place the ping in the stream of bytes written
	// to the client's socket, as its TCP stack counts them (TLS records
	// and all): the position just after its last byte, and its length on
	// the wire, set once the ping is wholly in the socket; pingEnd is 0
	// until then.
	pingEnd atomic.Uint64
	pingLen atomic.Uint32
	looks   atomic.Uint32 // looks taken so far, for the tests
	timer   atomic.Pointer[time.Timer]
}

// keepaliveTick looks at the client once: a client that sent a byte since
// the last look is alive; one that sent nothing gets a ping, and is cut
// at a later look unless it may still answer (see answerMayCome). It
// returns when to look again, 0 for never (the tunnel is closing or the
// client was cut).
func (t *Tunnel) keepaliveTick() time.Duration {
	k := t.ka
	k.looks.Add(1)
	heard := t.toNode.bytes.Load()
	switch {
	case t.closeBy.Load() != 0:
		return 0 // closing: the close timeout bounds the rest
	case heard != k.heard:
		k.heard, k.pingAt = heard, 0
		return k.interval
	case k.pingAt == 0:
		k.pingAt = max(mono(time.Now()), 1)
		k.pingEnd.Store(0)
		k.acked, _ = t.clientAcked()
		t.toClient.injectPing()
		return k.timeout
	case t.answerMayCome():
		return k.timeout
	default:
		t.pongTimedOut()
		return 0
	}
}

// answerMayCome reports whether a client that has sent nothing since its
// ping is given another pong timeout, at a look after the ping.
//
// A client whose TCP stack acknowledges bytes queued ahead of the ping
// takes them: a slow reader of a stream finds the ping only behind the
// megabytes the sockets buffer, and answers once it gets there. Its
// stack acknowledging the ping itself, or bytes after it, says nothing of
// its application: a stack acknowledges what its receive buffer has room
// for, read or not. So once the ping is acknowledged the client has one
// pong timeout to answer: a look that finds the ping acknowledged cuts it
// when everything before the ping was acknowledged at the last look
// (the ping then reached it within about a round trip of that look), and
// otherwise gives it one more. A ping that waits for the end of a node
// frame, with nothing queued toward the client, is waited for.
//
// The whole wait is capped at the write timeout plus the pong timeout
// from the ping: a client whose ping waits that long for a frame the node
// does not end, or behind bytes the client takes a drop at a time, is cut
// too.
func (t *Tunnel) answerMayCome() bool {
	k := t.ka
	if mono(time.Now())-k.pingAt >= int64(t.writeTimeoutOrDefault()+k.timeout) {
		return false
	}
	acked, ok := t.clientAcked()
	prev := k.acked
	if ok {
		k.acked = acked
	}
	took := ok && acked > prev
	end := k.pingEnd.Load()
	switch {
	case end == 0:
		// The ping is not wholly in the socket yet: it waits behind a
		// write (the client takes its bytes or not), or for the end of
		// a node frame.
		return took || t.toClient.pingWaitsForNode()
	case acked < end:
		return took
	default:
		return prev < end-uint64(k.pingLen.Load())
	}
}

// notePing records where the keepalive ping lies in the client's socket
// (see keepalive.pingEnd), once it is wholly there: from its first byte's
// position to end.
func (t *Tunnel) notePing(from, end uint64) {
	t.ka.pingLen.Store(uint32(min(end-from, 1<<16)))
	t.ka.pingEnd.Store(end)
}

// isPing reports whether b is the gateway's keepalive ping, as forward and
// afterWrite queue it.
func isPing(b []byte) bool {
	return len(b) == len(pingFrame) && &b[0] == &pingFrame[0]
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
	t.eng.cutClient(t)
}

// startKeepalive starts the stream engine's keepalive timer.
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

// stopKeepalive stops the stream engine's keepalive timer; a tick
// already running finds the tunnel closing and stops by itself.
func (t *Tunnel) stopKeepalive() {
	if t.ka == nil {
		return
	}
	if tm := t.ka.timer.Load(); tm != nil {
		tm.Stop()
	}
}
