package upgrade

import (
	"crypto/rand"
	"encoding/base64"
	"net"

	"github.com/valyala/fasthttp"
)

// ClientStream is the client's side of a request that came as a stream of
// an HTTP/2 connection (gateway.tls.h2): the connection a
// fasthttp.RequestCtx built for the stream reports as ctx.Conn(). It is
// what the tunnel reads and writes once the handshake is accepted.
//
// A WebSocket over HTTP/2 is an extended CONNECT with :protocol websocket
// (RFC 8441), which the gateway admits as the HTTP/1.1 handshake it
// stands for: a GET with Upgrade: websocket and Connection: Upgrade, and
// neither Sec-WebSocket-Key nor, in the answer, Sec-WebSocket-Accept.
type ClientStream interface {
	net.Conn
	// Accept answers the extended CONNECT with :status 200 and the fields
	// of head, an HTTP/1.1 101 response head, less those of the HTTP/1.1
	// upgrade (Upgrade, Connection, Sec-WebSocket-Accept; RFC 8441
	// section 5): Sec-WebSocket-Protocol and -Extensions as the node
	// chose. From then on the stream belongs to whoever runs the tunnel,
	// and no HTTP answer is written on it.
	Accept(head []byte) error
}

// StreamOf returns the HTTP/2 stream ctx's request came on, or nil for a
// request of an HTTP/1.x connection. It is decided by the connection, not
// by anything the request says (an HTTP/1.1 client may write "HTTP/2.0" in
// its request line).
func StreamOf(ctx *fasthttp.RequestCtx) ClientStream {
	s, _ := ctx.Conn().(ClientStream)
	return s
}

// NewKey returns a fresh Sec-WebSocket-Key (base64 of 16 random bytes,
// RFC 6455 section 4.1) for the HTTP/1.1 upgrade a node gets for a
// client's extended CONNECT, which carries none.
func NewKey() []byte {
	var k [16]byte
	_, _ = rand.Read(k[:]) // never fails (crypto/rand)
	b := make([]byte, base64.StdEncoding.EncodedLen(len(k)))
	base64.StdEncoding.Encode(b, k[:])
	return b
}

// Gone reports whether ctx's request came on an HTTP/2 stream that has
// since failed: the client reset it, or its connection ended. Such a
// request's admission stops at its next step (after the auth chain,
// before a node is picked, before a node is dialed or sent the request),
// so that a client that opens and resets streams (rapid reset, CVE
// 2023-44487) never makes the gateway reach a node for a request already
// gone. A request of an HTTP/1.x connection is never gone here (its
// connection's end shows when its answer is written).
func Gone(ctx *fasthttp.RequestCtx) bool {
	g, ok := ctx.Conn().(goner)
	return ok && g.Gone()
}

// Ended returns a channel closed once ctx's HTTP/2 stream has ended (the
// client reset it, or its connection ended), so that a wait on a node
// (OpenNodeStream) gives up with it; nil for a request of an HTTP/1.x
// connection, which never ends here.
func Ended(ctx *fasthttp.RequestCtx) <-chan struct{} {
	if d, ok := ctx.Conn().(doner); ok {
		return d.Done()
	}
	return nil
}

// doner is a client stream that tells when it ends.
type doner interface{ Done() <-chan struct{} }

// goner is a client stream that knows whether it has failed.
type goner interface{ Gone() bool }
