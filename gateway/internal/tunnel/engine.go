package tunnel

import "time"

// engine is how a tunnel does its I/O: the event-driven engine (*poller,
// Linux: see engine_linux.go) or the stream engine (*stream: see
// stream.go). The framing (half.go) and the tunnel's life (tunnel.go) are
// the same on both and call it where they read, write or close; the
// engine is chosen once, in New, and held in the Tunnel's place of the
// poller pointer, so it costs no memory of its own.
//
// Every method but the writes' is called at most a few times per tunnel;
// write is called once per forward that has something for dst.
type engine interface {
	// name is the engine's label (Tunnel.Engine).
	name() string
	// start starts moving bytes, forwarding first the client's and the
	// node's bytes read before the tunnel began.
	start(t *Tunnel, cp, np []byte)
	// goAway starts the close and sends the client the gateway's close,
	// in the engine's context (on the poller, the poller's goroutine).
	goAway(t *Tunnel, code uint16, reason string)
	// abort closes both connections, in the engine's context.
	abort(t *Tunnel)
	// armClose bounds the rest of the tunnel's life by the close
	// deadline dl, just set.
	armClose(t *Tunnel, dl time.Time)
	// finish finishes a tunnel whose two sides have ended (Tunnel.finish),
	// off the poller on the event-driven engine.
	finish(t *Tunnel)
	// closeConns closes both connections, once.
	closeConns(t *Tunnel)
	// cutClient ends the reading of the client as a read deadline does
	// (the keepalive's pong timeout).
	cutClient(t *Tunnel)

	// write writes what forward queued for h's dst, the last segment
	// being the gateway's close frame when lastIsClose. The caller holds
	// the write turn; the write gives it back (see half.afterWrite).
	write(h *half, out [][]byte, lastIsClose bool)
	// writeOwn writes the gateway's own close frame (isClose) or
	// keepalive ping now, from the caller, with the write turn taken.
	writeOwn(h *half, frame []byte, isClose bool)
	// writeOwnSoon is writeOwn for a caller that must not wait on I/O:
	// on the stream engine a goroutine of its own writes it.
	writeOwnSoon(h *half, frame []byte, isClose bool)
	// waitTurn waits, mu held, until the write turn is given back.
	waitTurn(h *half)
	// closeDst closes h's dst after a write to it timed out, so the other
	// direction's read of it ends too.
	closeDst(h *half)
	// endDst ends the stream to h's dst once what it was already given
	// is written (see half.endInsideFrame).
	endDst(h *half)
}
