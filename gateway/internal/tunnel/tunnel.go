// Package tunnel carries one WebSocket connection between a client and a
// relay node after the handshake. It passes bytes both ways without
// unmasking payloads, follows frame headers with a wsframe.Scanner per
// direction, and so can put its own close frame between two frames: close
// 1001 on a drain, 1012 to the client when the node vanishes without a close
// frame, 1009 for a frame over the route's limit.
//
// The engine is a goroutine pair per tunnel that reads through the runtime
// poller without holding a buffer while idle; buffers come from a shared pool
// only while bytes are in flight.
package tunnel

import (
	"net"
	"sync"
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

// lastWordTimeout bounds the write of the close frame that tells one side
// the other is gone.
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

	// Lease is released exactly once, after both connections are closed.
	Lease Releaser

	// OnEnd, when set, is called once at the very end, after Lease.
	OnEnd func(*Tunnel)
}

// Tunnel is one live WebSocket tunnel. Its methods are safe for concurrent
// use. A Tunnel must not be copied.
type Tunnel struct {
	toNode   half // client → node
	toClient half // node → client

	client, node net.Conn
	closeTimeout time.Duration
	lease        Releaser

	clientPending, nodePending []byte // until Start
	onEnd                      func(*Tunnel)

	// clientDone and nodeDone are set when that side has sent its close
	// frame or its connection has failed; when both are set the close
	// handshake is over and both connections are closed.
	clientDone, nodeDone atomic.Bool
	closing              atomic.Bool // deadline set for the close handshake
	closeOnce            sync.Once
	pumps                atomic.Int32
	done                 chan struct{}
}

// New prepares a tunnel; nothing moves until Start.
func New(p Params) *Tunnel {
	t := &Tunnel{
		client:       p.Client,
		node:         p.Node,
		closeTimeout: p.CloseTimeout,
		lease:        p.Lease,
		onEnd:        p.OnEnd,
		done:         make(chan struct{}),
	}
	if t.closeTimeout <= 0 {
		t.closeTimeout = DefaultCloseTimeout
	}
	t.toNode.init(t, p.Client, p.Node, false)
	t.toNode.sc = wsframe.Scanner{MaxPayload: p.MaxFrame, RequireMasked: true}
	t.toClient.init(t, p.Node, p.Client, true)
	t.toClient.sc = wsframe.Scanner{RejectMasked: true}
	t.clientPending, t.nodePending = p.ClientPending, p.NodePending
	return t
}

// Start begins tunnelling and returns at once. The tunnel ends by itself when
// the close handshake finishes, a side fails, or the close timeout passes.
// Start must be called once.
func (t *Tunnel) Start() {
	t.pumps.Store(2)
	cp, np := t.clientPending, t.nodePending
	t.clientPending, t.nodePending = nil, nil
	go t.pumpClientToNode(cp)
	go t.pumpNodeToClient(np)
}

// Done is closed when the tunnel has ended and released its lease.
func (t *Tunnel) Done() <-chan struct{} { return t.done }

// GoAway closes the tunnel on the gateway's behalf: the client gets a close
// with code at the next frame boundary, and from then on the node's frames
// are dropped. Frames the client sent before it read that close still reach
// the node, and so does the client's close reply, which ends the node's side
// as an ordinary close: a drain loses no client write. A client that does
// not answer within the close timeout is cut, and the node then gets a close
// 1001 of the gateway's own.
func (t *Tunnel) GoAway(code uint16, reason string) {
	t.startClosing()
	t.toClient.injectClose(code, reason)
}

// Abort closes both connections at once, without a close handshake.
func (t *Tunnel) Abort() { t.closeConns() }

// Stats is a snapshot of a tunnel's counters.
type Stats struct {
	FramesToNode, FramesToClient uint64 // whole frames forwarded
	BytesToNode, BytesToClient   uint64 // bytes read from each side
	ClientCloseCode              uint16 // code of the client's close frame, 0 if none
	NodeCloseCode                uint16 // code of the node's close frame, 0 if none
	GatewayToClientCode          uint16 // code of the gateway's own close to the client, 0 if none
	GatewayToNodeCode            uint16 // code of the gateway's own close to the node, 0 if none
}

// Stats returns the tunnel's counters so far.
func (t *Tunnel) Stats() Stats {
	var s Stats
	s.FramesToNode, s.BytesToNode, s.ClientCloseCode, s.GatewayToNodeCode = t.toNode.stats()
	s.FramesToClient, s.BytesToClient, s.NodeCloseCode, s.GatewayToClientCode = t.toClient.stats()
	return s
}

// pumpClientToNode forwards the client's frames to the node until the client
// side ends.
func (t *Tunnel) pumpClientToNode(pending []byte) {
	t.toNode.pump(pending)
	// The client is gone or has closed: the node learns it with a close
	// frame unless the client's own close was already passed on.
	t.clientDone.Store(true)
	if !t.toNode.sawClose() {
		// The close deadline may have passed for writes too.
		_ = t.node.SetWriteDeadline(time.Now().Add(lastWordTimeout))
		t.toNode.injectClose(CodeGoingAway, "client went away")
	}
	t.pumpExited()
}

// pumpNodeToClient forwards the node's frames to the client until the node
// side ends.
func (t *Tunnel) pumpNodeToClient(pending []byte) {
	t.toClient.pump(pending)
	t.nodeDone.Store(true)
	if !t.toClient.sawClose() {
		_ = t.client.SetWriteDeadline(time.Now().Add(lastWordTimeout))
		t.toClient.injectClose(CodeServiceRestart, "upstream went away")
	}
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
		t.closeConns()
		return
	}
	t.startClosing()
}

// startClosing bounds the rest of the tunnel's life by the close timeout.
func (t *Tunnel) startClosing() {
	if t.closing.Swap(true) {
		return
	}
	dl := time.Now().Add(t.closeTimeout)
	_ = t.client.SetDeadline(dl)
	_ = t.node.SetDeadline(dl)
}

// pumpExited ends the tunnel when the second pump has returned.
func (t *Tunnel) pumpExited() {
	if t.clientDone.Load() && t.nodeDone.Load() {
		t.closeConns()
	} else {
		t.startClosing()
	}
	if t.pumps.Add(-1) != 0 {
		return
	}
	t.closeConns()
	if t.lease != nil {
		t.lease.Release()
	}
	if t.onEnd != nil {
		t.onEnd(t)
	}
	close(t.done)
}

func (t *Tunnel) closeConns() {
	t.closeOnce.Do(func() {
		_ = t.client.Close()
		_ = t.node.Close()
	})
}
