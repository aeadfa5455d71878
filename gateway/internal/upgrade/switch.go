package upgrade

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// Host is what a Switch reports to: the gateway, which registers tunnels
// and counts handshakes.
type Host interface {
	// Reserve makes a drain wait for a handshake about to become a
	// tunnel; Unreserve ends the wait, once the tunnel is registered or
	// the handshake given up.
	Reserve()
	Unreserve()
	// Handshake counts a handshake that ended with result (client_gone
	// here) after it started at start.
	Handshake(result string, start time.Time)
	// StartTunnel starts the tunnel between the client connection c,
	// whose 101 has been sent, and sw's node connection.
	StartTunnel(c net.Conn, sw *Switch)
}

// Switch carries a handshake whose node answered 101 from the handler to
// the tunnel: the node connection, the client's 101 (rendered in Hdr when
// it fits) and the hijack's state. It lives until the tunnel starts.
// (It is not the restart hand-off of internal/handoff.) It is one
// allocation per handshake; its small fields sit together to keep it
// small.
type Switch struct {
	sw *Switches
	// Route is the route the handshake was admitted on; Start when its
	// request was read.
	Route *route.Route
	Start time.Time
	// Timeout is handshake_timeout; WriteTimeout, ExpiryGrace and Engine
	// are the tunnel's settings of the config the handshake was admitted
	// under, for Host.StartTunnel.
	Timeout      time.Duration
	WriteTimeout time.Duration
	ExpiryGrace  time.Duration
	// Node is the node connection, filled by DialNode; Entry the live
	// tunnel's registry entry, holding the node's lease.
	Node  NodeConn
	Entry *registry.Entry
	timer *time.Timer
	// claimed is set by whichever of the hijack handler and the timer
	// runs first; the other does nothing.
	claimed atomic.Bool
	// late is set when the 101 is written by the hijack handler, after
	// fasthttp has flushed the answers to earlier requests (see Run);
	// conn is then the connection as fasthttp's handler saw it, the key
	// under which Switches holds the Switch until the hijack.
	late   bool
	Engine tunnel.Engine
	conn   net.Conn
	// Hdr is room for the client's 101, which DialNode renders into.
	Hdr [320]byte
}

// Switches is where a gateway's Switches report: its Host, and the
// Switches whose 101 waits for fasthttp to flush earlier answers, by
// client connection (see Switch.Run). It is safe for concurrent use once
// Host is set, and must not be copied.
type Switches struct {
	Host    Host
	waiting sync.Map
}

// New returns the Switch of a handshake admitted on rt at start, with a
// handshake_timeout of timeout.
func (w *Switches) New(rt *route.Route, start time.Time, timeout time.Duration) *Switch {
	return &Switch{sw: w, Route: rt, Start: start, Timeout: timeout}
}

// ConnState is the client server's ConnState hook: a connection fasthttp
// closes while a late Switch waits for its hijack (the flush of the
// earlier answers failed) gives that handshake up at once.
func (w *Switches) ConnState(c net.Conn, st fasthttp.ConnState) {
	if st != fasthttp.StateClosed {
		return
	}
	if v, ok := w.waiting.Load(c); ok {
		v.(*Switch).expire()
	}
}

// Waiting is the number of handshakes waiting for their hijack.
func (w *Switches) Waiting() int {
	n := 0
	w.waiting.Range(func(any, any) bool { n++; return true })
	return n
}

// Run sends the client its 101 and hands the connection to the tunnel.
// On a connection's first request the 101 is written here, from the
// handler, the moment the node's was checked, rather than after fasthttp
// has handed over the connection. A later request may have been pipelined
// behind earlier ones whose answers fasthttp still holds in its write
// buffer (it flushes only once it has no further request bytes to read),
// and HTTP/1.1 answers go out in request order: so there the 101 is
// written by the hijack handler, which fasthttp calls after flushing that
// buffer, under a write deadline of handshake_timeout. If fasthttp never
// calls the hijack handler (the client vanished), a timer releases the
// node connection and the entry, so they are released exactly once on
// every path.
//
// On an HTTP/2 stream (see ClientStream) there is no hijack: the stream is
// answered 200 and handed to the tunnel here, on the stream's goroutine.
func (h *Switch) Run(ctx *fasthttp.RequestCtx) {
	// From here until the tunnel is registered (or the handshake given
	// up) a drain waits for it, so a client that gets its 101 during a
	// drain still gets its 1001.
	h.sw.Host.Reserve()
	if st := StreamOf(ctx); st != nil {
		h.claimed.Store(true) // no timer, no hijack
		if err := st.Accept(h.Node.Header); err != nil {
			h.clientGone()
			_ = st.Close()
			return
		}
		h.sw.Host.StartTunnel(st, h)
		h.sw.Host.Unreserve()
		return
	}
	ctx.HijackSetNoResponse(true)
	if ctx.ConnRequestNum() > 1 {
		h.late, h.conn = true, ctx.Conn()
		// Bounds fasthttp's flush of the earlier answers (its own
		// write_timeout would apply otherwise).
		_ = ctx.SetWriteDeadline(time.Now().Add(h.Timeout))
		// A flush that fails (the client is gone) closes the connection
		// without a hijack: ConnState then gives the handshake up at
		// once, rather than the timer handshake_timeout later, which
		// would let a client that resets hold node slots for that long
		// each, beyond what max_conns_per_ip counts.
		h.sw.waiting.Store(h.conn, h)
		h.timer = time.AfterFunc(h.Timeout, h.expire)
		ctx.Hijack(h.hijacked)
		return
	}
	c := ctx.Conn()
	// fasthttp clears the deadline before it hands the connection over.
	_ = c.SetWriteDeadline(time.Now().Add(h.Timeout))
	if _, err := c.Write(h.Node.Header); err != nil {
		h.clientGone()
		ctx.Hijack(closeConn)
		return
	}
	h.timer = time.AfterFunc(h.Timeout, h.expire)
	ctx.Hijack(h.hijacked)
}

// clientGone gives the handshake up when its 101 could not be written.
func (h *Switch) clientGone() {
	_ = h.Node.Conn.Close()
	h.Entry.Release()
	h.sw.Host.Handshake("client_gone", h.Start)
	h.sw.Host.Unreserve()
}

// closeConn is the hijack handler of a client whose 101 could not be sent.
func closeConn(c net.Conn) { _ = c.Close() }

// expire gives the handshake up when fasthttp has not handed over the
// client connection in time, or has closed it instead (ConnState).
func (h *Switch) expire() {
	if h.claimed.CompareAndSwap(false, true) {
		h.timer.Stop()
		h.forgetLate()
		_ = h.Node.Conn.Close()
		h.Entry.Release()
		h.sw.Host.Handshake("client_gone", h.Start)
		h.sw.Host.Unreserve()
	}
}

// forgetLate drops a late Switch from the waiting ones.
func (h *Switch) forgetLate() {
	if h.late {
		h.sw.waiting.CompareAndDelete(h.conn, h)
	}
}

// hijacked is the hijack handler: it starts the tunnel on c.
func (h *Switch) hijacked(c net.Conn) {
	if !h.claimed.CompareAndSwap(false, true) {
		_ = c.Close()
		return
	}
	h.timer.Stop()
	h.forgetLate()
	if h.late {
		// fasthttp has flushed every earlier answer and cleared the
		// deadlines.
		_ = c.SetWriteDeadline(time.Now().Add(h.Timeout))
		_, err := c.Write(h.Node.Header)
		_ = c.SetWriteDeadline(time.Time{})
		if err != nil {
			h.clientGone()
			_ = c.Close()
			return
		}
	}
	h.sw.Host.StartTunnel(c, h)
	h.sw.Host.Unreserve()
}
