// Package relay is the reference WebSocket relay behind the wsgate gateway.
//
// Clients join a room with GET {prefix}{room}; every text or binary message
// a member sends is committed to the room's log (Options.Log: an epoch and a
// dense offset per message, see roomlog), which publishes it to every
// replica over Options.Bus, and reaches every other member of the room
// exactly once and in offset order; it is never echoed to its sender. One
// goroutine per room delivers: it tracks the last offset it delivered, and a
// message past a gap, a bus resubscribe or a full room queue makes it read
// the missing offsets from the log first.
//
// Plain clients get the room's retained history on join, then live
// messages, with their frame types kept. relay.v1 clients (the subprotocol,
// docs/protocol.md) get binary frames with positions: POS, an optional
// RESYNC, the replay after ?since=, LIVE, then live messages and an ACK for
// each message they sent, once committed.
//
// A member that cannot keep up is closed with 1013, a message over the size
// limit closes its sender with 1009, a text message that is not valid UTF-8
// closes its sender with 1007 and is neither stored nor relayed, a room log
// failure closes with 1011, and Drain says goodbye (1001) to every client,
// spread over a window, so they reconnect elsewhere a few at a time. When
// the bus reports its server lost (bus.StateWatcher: Redis gone), every
// client is closed with 1012 and /healthz and joins answer 503 until it is
// back.
//
// On its one port a Relay speaks HTTP/1.1 and cleartext HTTP/2 with prior
// knowledge (h2serve): a gateway may carry many clients over a few HTTP/2
// connections, each client's WebSocket an extended CONNECT stream (RFC
// 8441) to the same room paths. Such a member is admitted by the same
// checks, answered with the same refusals, and served exactly as one that
// came over HTTP/1.1; Drain sends GOAWAY on every HTTP/2 connection first.
// A member over HTTP/1.1 has a reader and a writer goroutine; one over
// HTTP/2 has none while it is idle: goroutines run for it only while its
// stream has DATA to parse or its queue has messages to write.
//
// Besides the rooms a Relay serves GET /healthz (with the Wsgate-Agent
// header for the gateway's checker), GET /info (JSON counters) and GET / (a
// small demo page).
package relay
