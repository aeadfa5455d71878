// Package tunnel carries one WebSocket connection between a client and a
// relay node after the handshake. It passes bytes both ways without
// unmasking payloads, follows frame headers with a wsframe.Scanner per
// direction, and so can put its own close frame between two frames: close
// 1001 on a drain, 1012 to the client when the node vanishes without a close
// frame, 1002 for a client frame that breaks the framing rules, 1009 for one
// over the route's limit.
//
// A client that breaks the rules sees what it would see talking to the node
// directly: the node's replies to the frames it sent before the bad one,
// then a close 1002 (1009) at a frame boundary. The frames before the bad
// header go to the node, nothing from it on does, and the node is told 1001
// (for the node the client went away; 1002 to the node is kept for a node
// that broke the rules). The node's frames still flow to the client until
// the node's close frame, which answers the gateway's close and is not
// passed on: the client gets its 1002 (1009) in its place. A node that does
// not answer within the close timeout, or vanishes, leaves the client with
// the same 1002 (1009), not 1012, since the client's error came first. Bytes
// after a side's own close frame are ignored, as a peer would ignore them.
//
// A close frame a side sent is passed on whenever it was read: a write to a
// side whose connection failed (reset, broken pipe) does not close that
// connection under the other direction, which reads on to the failure; a
// 1012 goes to the client only when the node's stream ends without a close
// frame. Only a side that accepts nothing in time is closed at once.
//
// Two engines run tunnels; they share the framing code (half.go, which
// does no I/O) and behave the same (engine.go is what they provide). A
// tunnel between two TCP sockets runs on the event-driven engine (Linux;
// see engine_linux.go and poller_linux.go): a few pollers, one per core,
// each carrying many tunnels with no goroutine and no buffer per idle
// tunnel. Any other (a TLS client; every tunnel on other systems) runs on
// the stream engine (stream.go), a goroutine pair that reads through the
// runtime poller without holding a buffer while idle; buffers come from a
// shared pool only while bytes are in flight. The keepalive's timers are
// in keepalive.go, the client's rate limit in clientrate.go. On both, no
// lock is held across I/O: every write has a deadline or is non-blocking
// (the write timeout, bounded by the close deadline once the close has
// started), the gateway's own close frames never wait behind a stalled
// write, and the counters are atomics, so Stats, GoAway and Abort never
// wait on a peer.
//
// Optional per route: keepalive pings to a silent client, with a pong
// deadline (Params.PingInterval), and token buckets on the frames and
// bytes a client sends (Params.FrameRate, ByteRate; over them, 1008).
package tunnel

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// Close codes the tunnel sends on its own behalf (RFC 6455 section 7.4).
const (
	CodeGoingAway      uint16 = 1001 // drain, restart, node removed, client vanished
	CodeProtocolError  uint16 = 1002 // the client broke the framing rules
	CodePolicy         uint16 = 1008 // the client's credential expired or was revoked
	CodeTooBig         uint16 = 1009 // a frame over the route's max_frame
	CodeServiceRestart uint16 = 1012 // the node vanished without a close frame
	CodeBadGateway     uint16 = 1014 // the node broke the framing rules
)

// DefaultCloseTimeout is how long a tunnel waits for the close handshake to
// finish once either side has started it, when Params.CloseTimeout is 0.
const DefaultCloseTimeout = 5 * time.Second

// DefaultWriteTimeout is how long a destination may accept no byte of a
// pending write before the tunnel ends, when Params.WriteTimeout is 0.
const DefaultWriteTimeout = 30 * time.Second

// lastWordTimeout is the least time the gateway's own close frame gets,
// even once the close deadline has passed, so the side left behind hears
// why.
const lastWordTimeout = time.Second

// Releaser is the node slot the tunnel holds; Release must be idempotent.
type Releaser interface{ Release() }

// Params describe one tunnel. Client and Node are owned by the tunnel from
// Start on: it closes them.
type Params struct {
	Client net.Conn // the client's connection, after the 101 was sent
	Node   net.Conn // the node's connection, after its 101 was read

	// ClientPending holds bytes already read from the client that belong
	// to the tunnel; NodePending the same from the node (bytes after the
	// node's 101 in the handshake read buffer). They are forwarded first.
	ClientPending, NodePending []byte

	// MaxFrame is the largest payload of one client frame in bytes
	// (default 0 = unlimited); a larger frame closes the client with 1009.
	MaxFrame uint64

	// CloseTimeout bounds the close handshake once either side started it
	// (default DefaultCloseTimeout).
	CloseTimeout time.Duration

	// WriteTimeout ends the tunnel when the client or the node accepts no
	// byte of a pending write for this long (default DefaultWriteTimeout).
	WriteTimeout time.Duration

	// Lease is released exactly once, after both connections are closed.
	Lease Releaser

	// OnEnd, when set, is called once at the very end, after Lease.
	OnEnd func(*Tunnel)

	// Engine chooses how the tunnel runs (default EngineAuto).
	Engine Engine
	// Counters, when set, are the totals the tunnel adds what it forwards
	// to, as it forwards (its own Stats count it too).
	Counters *Counters

	// PingInterval, when > 0, turns keepalive on: a client that has sent
	// nothing since the last look, once an interval, gets a ping between
	// two frames. Any byte from the client answers (its pong goes on to
	// the node: RFC 6455 allows an unsolicited pong). A client that has
	// not answered is cut (EndPongTimeout) and the node gets close 1001,
	// looked at once a PongTimeout: when for a PongTimeout its TCP stack
	// acknowledged none of the bytes queued ahead of the ping, or a
	// PongTimeout after it acknowledged the ping itself (what it
	// acknowledges after the ping says nothing of its application), or at
	// the latest WriteTimeout + PongTimeout after the ping. A reader of a
	// stream whose ping waits behind megabytes of socket buffers is kept
	// while it reads its way to it.
	PingInterval time.Duration
	// PongTimeout is the keepalive's answer deadline (default
	// DefaultPongTimeout).
	PongTimeout time.Duration

	// FrameRate and ByteRate cap the frames and bytes the client may send
	// per second (0 = no cap), each a token bucket holding one second's
	// worth. A read that ends no frame and brings fewer than 64 bytes is
	// charged as one frame and 64 bytes, so a client dripping its frames a
	// byte per segment runs out as a flood does. A client over either gets
	// 1008 after the node's replies to its earlier frames, as for a frame
	// over MaxFrame; a node left inside the client's frame gets the end of
	// its stream instead of a close.
	FrameRate, ByteRate uint64
}

// DefaultPongTimeout is the keepalive's answer deadline when
// Params.PongTimeout is 0.
const DefaultPongTimeout = 10 * time.Second

// Engine says how a tunnel runs.
type Engine uint8

// testEngine, set by this package's tests only, runs every tunnel on the
// stream engine when it is EngineGoroutines, so the one suite covers
// both engines (see main_test.go).
var testEngine Engine

// The engines.
const (
	// EngineAuto runs a tunnel whose two connections are TCP sockets on
	// the event-driven engine (Linux), any other on goroutines.
	EngineAuto Engine = iota
	// EngineGoroutines runs every tunnel as a goroutine pair.
	EngineGoroutines
)

// Tunnel is one live WebSocket tunnel. Its methods are safe for concurrent
// use. A Tunnel must not be copied.
//
// An idle tunnel on the event-driven engine holds this value and nothing
// else of its own (448 bytes, one of the runtime's size classes: TestTunnelSize):
// state that only the stream engine, a route option or a closing tunnel
// needs hangs off pointers that are nil otherwise (eng is the poller's).
type Tunnel struct {
	toNode   half // client → node
	toClient half // node → client

	// client is the client's connection, closed at the end (on the
	// event-driven engine only that: a wrapper frees what it holds). The
	// node's is the stream engine's or gone (event-driven).
	client       net.Conn
	lease        Releaser
	onEnd        func(*Tunnel)
	pending      *[2][]byte // the client's and the node's pending bytes, until Start
	closeTimeout time.Duration
	writeTimeout time.Duration
	closeBy      atomic.Int64 // close deadline in mono ns, 0 until the close starts
	rate         *clientRate  // the client's frame and byte rate limit; nil: none
	ka           *keepalive   // nil: no keepalive pings
	// done is the channel Done returned, made by its first call; once the
	// tunnel has ended it holds closedDone (see finish).
	done atomic.Pointer[chan struct{}]

	// clientDone and nodeDone are set when that side has sent its close
	// frame or its connection has failed; when both are set the close
	// handshake is over and both connections are closed.
	clientDone, nodeDone atomic.Bool
	reason               atomic.Uint32
	firstClose           atomic.Uint32 // the Closer of the first close frame
	pumps                atomic.Int32
	// slot is t's slot in its poller's table, negative while it has none
	// (-1, or slotNodeWatched before watch; the event-driven engine's,
	// here to fill the word pumps leaves).
	slot int32

	// eng is the engine the tunnel runs on: its poller, or its state on
	// the stream engine.
	eng engine
	// The event-driven engine's state (see engine_linux.go), used by the
	// poller only.
	// clientFD is -1 once closed (fdsClosed); nodeFD is -1 for a node
	// stream (ns).
	clientFD, nodeFD int32
	// ns is the node's connection on the event-driven engine when it is
	// a stream of a multiplexed connection (see NodeStream); nil for a
	// socket.
	ns *polledStream

	// count is the stripe of Params.Counters the tunnel counts into; nil
	// without Counters.
	count *counterStripe
}

// closedDone is the closed channel Done returns once a tunnel has ended.
var closedDone = func() *chan struct{} {
	c := make(chan struct{})
	close(c)
	return &c
}()

// New prepares a tunnel; nothing moves until Start.
func New(p Params) *Tunnel {
	t := &Tunnel{
		client:       p.Client,
		closeTimeout: p.CloseTimeout,
		writeTimeout: p.WriteTimeout,
		lease:        p.Lease,
		onEnd:        p.OnEnd,
	}
	if p.Counters != nil {
		t.count = p.Counters.stripeFor(t)
	}
	if t.closeTimeout <= 0 {
		t.closeTimeout = DefaultCloseTimeout
	}
	if t.writeTimeout <= 0 {
		t.writeTimeout = DefaultWriteTimeout
	}
	// Both sides count as running from here: a tunnel aborted before
	// Start still ends (on the poller at once, on goroutines once Start
	// finds its connections closed).
	t.pumps.Store(2)
	polled := p.Engine == EngineAuto && testEngine == EngineAuto && t.adopt(p.Node)
	if r := t.records(); r != nil && len(r.pending) > 0 {
		// Data the client sent behind its request that fasthttp did not
		// read goes after what it did.
		p.ClientPending = append(append([]byte(nil), p.ClientPending...), r.pending...)
		r.pending = nil
	}
	t.toNode.init(t, false)
	t.toNode.sc = wsframe.Scanner{MaxPayload: p.MaxFrame, RequireMasked: true}
	t.toClient.init(t, true)
	t.toClient.sc = wsframe.Scanner{RejectMasked: true}
	if !polled {
		t.eng = newStream(t, p.Client, p.Node)
	}
	if p.FrameRate > 0 || p.ByteRate > 0 {
		t.rate = newClientRate(p.FrameRate, p.ByteRate)
	}
	if p.PingInterval > 0 {
		t.ka = &keepalive{interval: p.PingInterval, timeout: p.PongTimeout}
		if t.ka.timeout <= 0 {
			t.ka.timeout = DefaultPongTimeout
		}
	}
	if len(p.ClientPending) > 0 || len(p.NodePending) > 0 {
		t.pending = &[2][]byte{p.ClientPending, p.NodePending}
	}
	return t
}

// Start begins tunnelling and returns at once. The tunnel ends by itself when
// the close handshake finishes, a side fails, or the close timeout passes.
// Start must be called once.
func (t *Tunnel) Start() {
	var cp, np []byte
	if t.pending != nil {
		cp, np = t.pending[0], t.pending[1]
		t.pending = nil
	}
	t.eng.start(t, cp, np)
}

// Engine names the engine the tunnel runs on: "epoll", "epoll-tls" or
// "goroutines".
func (t *Tunnel) Engine() string {
	if t.records() != nil {
		return EngineNameTLS
	}
	return t.eng.name()
}

// EngineNameTLS is Engine's name for a tunnel whose client is TLS and
// whose records the event-driven engine runs (see RecordConn).
const EngineNameTLS = "epoll-tls"

// Done is closed when the tunnel has ended and released its lease. The
// channel is made by the first call (a tunnel nobody waits on holds none).
func (t *Tunnel) Done() <-chan struct{} {
	if d := t.done.Load(); d != nil {
		return *d
	}
	c := make(chan struct{})
	if t.done.CompareAndSwap(nil, &c) {
		return c
	}
	return *t.done.Load() // made meanwhile, or the tunnel ended
}

// Lease is the Releaser the tunnel was made with (Params.Lease).
func (t *Tunnel) Lease() Releaser { return t.lease }

// GoAway closes the tunnel on the gateway's behalf: the client gets a close
// with code at the next frame boundary, and from then on the node's frames
// are dropped. Frames the client sent before it read that close still reach
// the node, and so does the client's close reply, which ends the node's side
// as an ordinary close: a drain loses no client write. A client that does
// not answer within the close timeout is cut, and the node then gets a close
// 1001 of the gateway's own. GoAway returns at once, even while a write to
// the client is stalled: the close then follows that write.
func (t *Tunnel) GoAway(code uint16, reason string) {
	t.eng.goAway(t, code, reason)
}

// Abort closes both connections at once, without a close handshake. Reads
// and writes in progress fail at once, so the tunnel ends promptly.
func (t *Tunnel) Abort() {
	t.setReason(EndAborted)
	t.eng.abort(t)
}

// EndReason says why a tunnel ended: the first cause the tunnel saw.
type EndReason uint8

// The reasons a tunnel ends.
const (
	EndClosed       EndReason = iota + 1 // the close handshake finished
	EndClientGone                        // the client's connection ended or failed without a close frame
	EndNodeGone                          // the node's connection ended or failed without a close frame
	EndWriteTimeout                      // the client or node accepted no byte for the write timeout
	EndCloseTimeout                      // the close handshake did not finish within the close timeout
	EndAborted                           // cut by Abort (a drain past its timeout)
	EndPongTimeout                       // the client sent nothing for the pong timeout after a keepalive ping
)

// EndReasons lists every reason, in order.
var EndReasons = []EndReason{EndClosed, EndClientGone, EndNodeGone, EndWriteTimeout, EndCloseTimeout, EndAborted, EndPongTimeout}

// String is the reason's label: closed, client_gone, node_gone,
// write_timeout, close_timeout, aborted, pong_timeout ("" for none).
func (r EndReason) String() string {
	switch r {
	case EndClosed:
		return "closed"
	case EndClientGone:
		return "client_gone"
	case EndNodeGone:
		return "node_gone"
	case EndWriteTimeout:
		return "write_timeout"
	case EndCloseTimeout:
		return "close_timeout"
	case EndAborted:
		return "aborted"
	case EndPongTimeout:
		return "pong_timeout"
	}
	return ""
}

// EndReason is the first cause of the tunnel's end seen so far: 0 while
// nothing has started to end it, final once Done is closed.
func (t *Tunnel) EndReason() EndReason { return EndReason(t.reason.Load()) }

// setReason records r unless a reason is recorded already.
func (t *Tunnel) setReason(r EndReason) { t.reason.CompareAndSwap(0, uint32(r)) }

// Stats is a snapshot of a tunnel's counters.
type Stats struct {
	FramesToNode, FramesToClient uint64    // whole frames forwarded
	BytesToNode, BytesToClient   uint64    // bytes read from each side
	ClientCloseCode              uint16    // code of the client's close frame, 0 if none
	NodeCloseCode                uint16    // code of the node's close frame, 0 if none
	GatewayToClientCode          uint16    // code of the gateway's own close to the client, 0 if none
	GatewayToNodeCode            uint16    // code of the gateway's own close to the node, 0 if none
	End                          EndReason // why the tunnel ends (see Tunnel.EndReason)
	FirstClose                   Closer    // who sent the first close frame, 0 if none
}

// Closer says who sent a tunnel's first close frame.
type Closer uint8

// The senders of a close frame.
const (
	ByClient  Closer = iota + 1 // the client's close frame, passed to the node
	ByNode                      // the node's close frame, passed to the client
	ByGateway                   // the gateway's own close to either side
)

// String is the closer's label: client, node, gateway ("" for none).
func (c Closer) String() string {
	switch c {
	case ByClient:
		return "client"
	case ByNode:
		return "node"
	case ByGateway:
		return "gateway"
	}
	return ""
}

// noteClose records c as the sender of the first close frame unless one
// is recorded already.
func (t *Tunnel) noteClose(c Closer) { t.firstClose.CompareAndSwap(0, uint32(c)) }

// Stats returns the tunnel's counters so far. It takes no lock and never
// waits, whatever the tunnel is doing.
func (t *Tunnel) Stats() Stats {
	var s Stats
	s.FramesToNode, s.BytesToNode, s.ClientCloseCode, s.GatewayToNodeCode = t.toNode.stats()
	s.FramesToClient, s.BytesToClient, s.NodeCloseCode, s.GatewayToClientCode = t.toClient.stats()
	s.End = t.EndReason()
	s.FirstClose = Closer(t.firstClose.Load())
	return s
}

// clientEnded ends the client side once reading the client stopped with
// err.
func (t *Tunnel) clientEnded(err error) {
	t.toNode.srcEnded(err)
	// The client is gone or has closed: the node learns it with a close
	// frame unless the client's own close was already passed on. The
	// client counts as done only once that is written, so the other pump
	// cannot close the node's connection under it.
	t.startClosing()
	if !t.toNode.sawClose() {
		t.toNode.lastWord(CodeGoingAway, "client went away")
	}
	t.clientDone.Store(true)
	t.pumpExited()
}

// nodeEnded ends the node side once reading the node stopped with err.
func (t *Tunnel) nodeEnded(err error) {
	t.toClient.srcEnded(err)
	t.startClosing()
	if !t.toClient.sawClose() {
		t.toClient.lastWord(CodeServiceRestart, "upstream went away")
	}
	t.nodeDone.Store(true)
	t.pumpExited()
}

// sideClosed records that one side sent its close frame; when both have, the
// close handshake is over.
func (t *Tunnel) sideClosed(fromClient bool) {
	if fromClient {
		t.clientDone.Store(true)
	} else {
		t.nodeDone.Store(true)
	}
	if t.clientDone.Load() && t.nodeDone.Load() {
		t.setReason(EndClosed)
		t.closeConns()
		return
	}
	t.startClosing()
}

// startClosing bounds the rest of the tunnel's life by the close timeout:
// reads by a deadline on both connections, writes by closeDeadline, which
// every write looks at (see half.send); on the event-driven engine, by a
// timer. It never waits.
func (t *Tunnel) startClosing() {
	dl := time.Now().Add(t.closeTimeout)
	if !t.closeBy.CompareAndSwap(0, mono(dl)) {
		return
	}
	t.eng.armClose(t, dl)
}

// writeTimeoutOrDefault is the write timeout, also for a Tunnel not made
// by New, as in benchmarks.
func (t *Tunnel) writeTimeoutOrDefault() time.Duration {
	if t.writeTimeout <= 0 {
		return DefaultWriteTimeout
	}
	return t.writeTimeout
}

// closeDeadline is when the close handshake must be over; zero until the
// close starts.
func (t *Tunnel) closeDeadline() time.Time {
	if ns := t.closeBy.Load(); ns != 0 {
		return monoTime(ns)
	}
	return time.Time{}
}

// pumpExited ends the tunnel when the second pump has returned.
func (t *Tunnel) pumpExited() {
	if t.clientDone.Load() && t.nodeDone.Load() {
		t.closeConns()
	}
	if t.pumps.Add(-1) != 0 {
		return
	}
	t.setReason(EndClosed) // every other cause was recorded where it was seen
	t.closeConns()
	t.eng.finish(t)
}

// finish releases the lease, calls OnEnd and closes Done.
func (t *Tunnel) finish() {
	t.stopKeepalive()
	if t.lease != nil {
		t.lease.Release()
	}
	if t.onEnd != nil {
		t.onEnd(t)
	}
	if !t.done.CompareAndSwap(nil, closedDone) {
		close(*t.done.Load()) // made by Done before the end
	}
}

// closeConns closes both connections, once.
func (t *Tunnel) closeConns() { t.eng.closeConns(t) }
