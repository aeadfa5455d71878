// Package health decides which relay nodes may take new connections. A
// [Checker] probes each node of a pool over HTTP (interval with jitter,
// timeout, rise, fall), listens to the node's own agent hints in the
// [AgentHeader] of its answers, ejects a node after failed dials and
// upstream handshakes reported to it (passive checks), and applies admin
// drains. It owns the node state machine and tells each node's [Target]
// of every transition.
//
// The package does not import the balancer, and the balancer does not
// import it: the gateway wires a balancer node to a [Target] with a small
// adapter and maps [State] to the balancer's state of the same name.
//
// A node added to a Checker starts up (optimistically), so a gateway that
// has just started serves at once; a node that is in fact down is marked
// down after the first Fall failed probes.
package health
