// Package h2serve is the server side of HTTP/2 for WebSockets carried as
// extended CONNECT streams (RFC 8441): cleartext with prior knowledge
// (RFC 9113 section 3.3), what relay-backend speaks to a gateway that
// multiplexes many clients over a few connections, and over TLS once ALPN
// chose h2 (ServeNegotiated), what the gateway speaks to browsers.
//
// The wire format is golang.org/x/net/http2's Framer and its hpack codec;
// this package is the glue: the preface and SETTINGS exchange (RFC 9113
// section 3.4, with SETTINGS_ENABLE_CONNECT_PROTOCOL, RFC 8441 section 3),
// stream states and limits (sections 5.1 and 5.1.2), flow control in both
// directions (sections 5.2 and 6.9), PING, GOAWAY and RST_STREAM.
//
// A Listener splits one listening port between HTTP/1.1, whose connections
// it returns from Accept for another server (fasthttp) with their first
// bytes replayed, and HTTP/2, which it recognises by the client preface and
// hands to a Server.
//
// A new stream is refused (REFUSED_STREAM) while MaxConcurrentStreams
// streams are open or still in their Handler, reset ones included, so
// streams opened and reset at once (CVE-2023-44487) get no more work done
// at a time than streams kept open; answers to control frames a client
// does not read are bounded (PING, SETTINGS, resets), and so are header
// blocks: their fields by MaxHeaderListSize (the Framer's check), their
// bytes, CONTINUATION frames included, to four times that (h2core.ReadBudget:
// the Framer reads on through fragments that decode to no field).
//
// The connection-level rules (the write queue and its deadlines, the
// answer and control-frame bounds, SETTINGS checks) are internal/h2core's,
// which the gateway's client role shares.
//
// Per HTTP/2 connection a Server runs one reader goroutine, which
// demultiplexes frames to streams, and one writer goroutine, which takes
// every frame queued for the connection since its last write and writes
// them all at once: the frames of one room fan-out, queued by many streams
// at about the same moment, leave in one write. Every network write, of
// at most 64 KiB, is bounded by Server.WriteTimeout. The queue is bounded
// too (Server.WriteQueue): while it is full, Writes wait, as on a TCP
// socket whose buffer is full, so a client that does not read holds its
// streams' writers back, not the server's memory. A Stream is a net.Conn;
// its receive window bounds what is buffered for it, and a stream whose
// send window is spent blocks its own writer only, until that writer's
// deadline. Each
// stream's Handler runs on a goroutine of its own; a Handler that Detaches
// its stream returns while the stream stays open, and whoever holds it is
// called back when it becomes readable, so a long-lived, mostly idle
// stream needs no goroutine.
//
// UpgradeWebSocket turns an extended CONNECT stream into a
// *websocket.Conn of github.com/fasthttp/websocket, the same type an
// HTTP/1.1 upgrade gives.
package h2serve
