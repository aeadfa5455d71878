// Package edge is the gateway's accept path: the listeners clients and
// operators connect to, before a byte of a request is read. A Listener
// pauses on transient accept errors instead of failing, takes each
// connection's slot from the Limiter (max_conns, max_conns_per_ip) at
// accept and answers one over a limit 429 or 503 itself, reads the PROXY
// header a trusted balancer sends, and wraps admitted connections in TLS
// with the Certificates in force, which a watcher loads again when their
// files change.
//
// It reports to the gateway through the small interfaces it declares
// (Metrics, AccessLog, ReloadMetrics) and reads the settings of the
// config in force through funcs, so it knows nothing of the gateway's
// server.
package edge
