// Package balancer chooses a backend node for each new WebSocket tunnel and
// counts the tunnels each node holds.
//
// It is pure logic with no I/O. A [Pool] holds a set of [Node] values and a
// [Picker] policy. [Pool.Acquire] filters the eligible nodes (up, under their
// cap, not excluded), lets the picker choose one and takes a [Lease] on it
// with a single compare-and-swap against the node's cap, so the count is
// raised at pick time, before the dial, and a burst never overshoots the
// cap. The caller holds the lease for the whole life of the tunnel and calls
// [Lease.Release] on every exit path; Release is idempotent, so an extra
// deferred call is harmless.
//
// Long-lived connections are balanced by open sessions, not by request
// counts or client address hashes: [LeastConn] is the default policy. It
// weighs nodes by [Node.EffectiveWeight]: the weight the node's own agent
// asked for ([Node.SetAgentWeight]) or else the configured weight, ramped
// up linearly after the node comes back ([Node.SetSlowStart]) so a fresh
// node is not handed every new connection at once. [RoundRobin] takes
// nodes in turn; [P2C] draws two nodes by weight and keeps the less loaded,
// so bursts of concurrent picks spread; [Hash] sends every request with the
// same key (a room id) to the same node by weighted rendezvous hashing, as
// long as that node stays within a bounded load ([Pool.AcquireKey]), and
// falls back to least connections for a request without a key.
//
// A [Registry] keeps nodes by pool and address across config reloads, so
// an address dropped while leases on it are held and then named again is
// the same node, whose cap still counts those leases.
//
// A node's [State] is set from outside (the health checker, through the
// gateway); only [StateUp] takes new connections. The balancer never
// decides health itself.
package balancer
