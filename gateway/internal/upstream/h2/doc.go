// Package h2 is the client side of the HTTP/2 connections from the gateway
// to a node, cleartext with prior knowledge ("h2c") or over a TLS
// connection whose ALPN selected "h2" (the dial's business), carrying
// WebSockets as
// extended CONNECT streams (RFC 8441 sections 4 and 5): Conn is one
// connection, Set the few a node's streams are spread over.
//
// The wire format is golang.org/x/net/http2's Framer and its hpack codec;
// this package is the glue: the connection preface and SETTINGS exchange
// (RFC 9113 section 3.4), stream states (section 5.1), flow control in both
// directions (sections 5.2 and 6.9), GOAWAY, PING and RST_STREAM.
//
// One Conn is one TCP connection with one reader (a goroutine, or a
// Poller) that demultiplexes frames to its streams; frames written by
// many streams are queued in one internal/h2core Queue, and every network
// write (each 64 KiB of it) is bounded by Config.WriteTimeout. What a
// node can make a connection queue or compute is bounded too, by the
// rules internal/h2core holds for both HTTP/2 roles: its answers
// (maxAnswerBytes), its PING and SETTINGS frames (controlBurst), the
// bytes of one header block, and a SETTINGS change costs the same
// whatever the number of streams. A Stream is a net.Conn, so that the existing stream
// engine can relay a WebSocket over it unchanged; the stream's receive
// window bounds what is buffered for it, so a reader that stops reading
// stops the node sending on that stream only.
package h2
