package health

import "time"

// Target is one node as the checker sees it. The balancer's Node satisfies
// most of it through a small gateway adapter.
//
// The checker calls a target's methods from its own goroutines, one call at
// a time per node, with the node's lock held: they must be quick and must
// not call back into the Checker.
type Target interface {
	// Addr is the node's host:port, the address probed.
	Addr() string
	// Live is the number of open connections on the node, used to tell
	// draining from drained.
	Live() int
	// SetState is called once on every transition of the node's state.
	SetState(State)
	// SetAgentWeight is called when the weight the node's agent asked for
	// changes; 0 means none (use the configured weight).
	SetAgentWeight(int)
	// SetSlowStart is called when the node comes up again and slow start
	// is configured: its share ramps from since for over.
	SetSlowStart(since time.Time, over time.Duration)
}

// Observer receives the checker's events, for metrics.
//
// Its methods are called from the checker's goroutines, ProbeDone without
// any lock and StateChanged with the node's lock held (so a node's changes
// arrive in order); they must be quick, safe for concurrent use, and must
// not call back into the Checker.
type Observer interface {
	// ProbeDone reports one active probe: ok when the node answered 2xx,
	// with the time from dial to answer (or to failure).
	ProbeDone(addr string, ok bool, latency time.Duration)
	// StateChanged reports one transition of a node's state.
	StateChanged(addr string, from, to State)
}
