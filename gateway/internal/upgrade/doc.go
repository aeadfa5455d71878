// Package upgrade carries an admitted WebSocket handshake to a node: the
// node's request rendered from the client's (AppendNodeRequest), the dial
// and the check of the node's 101 (DialNode), and the hand-over of the
// client connection from fasthttp's hijack to the tunnel (Switch), with
// the connection under fasthttp's wrapper recovered by Detach.
//
// Which node is tried, the node's health and the refusals a failed
// upgrade ends in are the gateway's wiring (gateway.serveUpgrade), which
// answers through admit's responder; the tunnel is started by the
// gateway too, through the Host a Switch reports to, since it registers
// the tunnel, counts it and checks revocations. The package also holds
// the header rules a request forwarded to a node follows (hop-by-hop
// headers, Connection tokens, X-Forwarded-For), which the plain HTTP
// proxy shares.
package upgrade
