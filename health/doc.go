// Package health decides which relay nodes may take new connections: active
// HTTP checks (interval with jitter, timeout, rise, fall) and passive
// ejection after failed dials and handshakes, feeding node states to the
// balancer. It does not import the balancer; the balancer's Node satisfies
// the small Target interface declared here.
package health

// Target is what a health checker steers: one node's address and whether it
// may take new connections.
type Target interface {
	// Addr is the node's host:port, the address probed.
	Addr() string
}
