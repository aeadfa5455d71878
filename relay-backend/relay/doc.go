// Package relay is the reference WebSocket relay behind the wsgate gateway.
//
// Clients join a room with GET {prefix}{room}; every text or binary frame a
// member sends reaches every other member of the room exactly once, on this
// replica directly and on other replicas through a bus.Bus, and is never
// echoed to its sender. A member that cannot keep up is closed with 1013, a
// frame over the size limit closes its sender with 1009, and Drain says
// goodbye (1001) to every client, spread over a window, so they reconnect
// elsewhere a few at a time.
//
// Besides the rooms a Relay serves GET /healthz, GET /info (JSON counters)
// and GET / (a small demo page).
package relay
