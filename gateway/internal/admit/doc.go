// Package admit is request admission on the client listener: the ordered
// steps a request passes before it reaches a node, each returning a
// Refusal (or none), and the one Responder that writes a refusal: its
// status, body, Retry-After, WWW-Authenticate and deny headers, the
// handshake metric's result label and the access log line.
//
// The steps, in the order gateway.handle runs them:
//
//   - a route for the host and path (NoRoute);
//   - handshake_rate_per_ip (IPRate.Check);
//   - the request's shape: framing, header names, a valid WebSocket
//     handshake, plain HTTP where the route takes it (Shape);
//   - the route's allowed origins (Origin);
//   - the route's auth chain, and the revocations in force (Authorizer);
//   - the pool's [pools.admission] rate (PoolRate, PoolAdmission), last,
//     so only requests that would reach a node take a token.
//
// Admission also happens elsewhere, and stays there:
//
//   - max_conns and max_conns_per_ip are taken when the connection is
//     accepted, by edge.Listener, which answers a socket over a limit
//     itself (429 or 503) before a byte of the request is read; an
//     HTTP/2 stream beside its connection's first takes a slot of its
//     own before admission (gateway.serveStream, edge.Limiter.Stream);
//   - an HTTP/2 stream reset while it is admitted stops after the auth
//     chain and before each node is picked (upgrade.Gone);
//   - a handshake no node has room for (no_capacity) or that the pool's
//     admission rate refuses is answered as the route's overflow says
//     (Overflow: 503, or an accepted upgrade closed with 1013); the
//     no_capacity one is found by the gateway's upgrade wiring
//     (gateway.serveUpgrade), which answers it through the Responder;
//   - a credential revoked while its handshake is between this check and
//     the tunnel's registration is caught by the revocation recheck after
//     the tunnel starts (gateway.startTunnel);
//   - a failed upgrade (no node answered, the gateway short of local
//     resources, a node's own refusal passed on) is answered through the
//     Responder by gateway.serveUpgrade, and a failed plain request by
//     gateway.serveHTTP.
//
// The package reads the gateway through the small interfaces it declares
// (Metrics, AccessLog, Revocations), so it knows nothing
// of the gateway's server.
package admit
