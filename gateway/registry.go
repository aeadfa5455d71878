package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// tunnelGoAwayCode is the close code of a planned drain (going away).
const tunnelGoAwayCode = tunnel.CodeGoingAway

// registry holds every live tunnel with the node it runs to, so a drain
// reaches all of them (or all of one node's), and keeps the counters of
// tunnels that ended so totals stay monotonic. A tunnel added while a drain
// runs is told to go away at once, and cut at once once the drain has cut
// the tunnels left (a handshake still in flight then).
//
// The live tunnels are a list threaded through their holds (no map: an
// idle tunnel costs the registry two pointers of its hold, and adding one
// allocates nothing).
type registry struct {
	mu       sync.Mutex
	head     *hold                   // the live tunnels' holds, newest first
	n        int                     // how many are live
	retired  map[*balancer.Node]bool // nodes leaving: removed, or drained with migrate
	draining bool
	cut      bool          // the drain timeout passed: abortAll ran
	pending  int           // handshakes reserved and not yet added (see reserve)
	empty    chan struct{} // made by wait, closed when live and pending are both empty
	ended    tunnel.Stats  // frames and bytes of ended tunnels
	// idle, when set, is called (without mu) when the last tunnel to a
	// leaving node has ended and its lease with it: the node may now be
	// forgotten, with its metric series.
	idle func()
}

// hold is what a tunnel keeps for its life: the node slot (the gateway's
// connection slot belongs to the client socket and is freed when it
// closes), and what the registry knows of it. Release frees the node slot,
// once. It is the tunnel's Lease (tunnel.Params), so the tunnel's end
// finds its hold.
type hold struct {
	lease *balancer.Lease
	t     *tunnel.Tunnel // set once the tunnel is made
	// prev and next link the live tunnels' holds (registry.head), under
	// the registry's lock.
	prev, next *hold
	expiry     *time.Timer // closes the tunnel when its credential expires
	// ext is what only some tunnels have: a credential, or the access
	// log's fields; nil otherwise.
	ext *holdExt
}

// holdExt is the part of a hold that the auth chain or the access log
// fills in.
type holdExt struct {
	expires time.Time // the credential's expiry (zero: none)
	subject string    // the credential's subject, for revocations
	key     string    // the credential's id, for revocations by key

	// For the access log (empty while it is off):
	client string    // the client's address
	path   string    // the request's path, without query string
	route  string    // the route's name
	start  time.Time // when the handshake arrived
}

// noExt is the ext of a hold that has none.
var noExt holdExt

// info is the hold's ext, or an empty one.
func (h *hold) info() *holdExt {
	if h.ext == nil {
		return &noExt
	}
	return h.ext
}

// node is the node the tunnel runs to.
func (h *hold) node() *balancer.Node { return h.lease.Node() }

// Release frees the node's slot; it is idempotent.
func (h *hold) Release() {
	h.lease.Release()
}

// add registers h's tunnel, h.t.
func (r *registry) add(h *hold) {
	n := h.node()
	r.mu.Lock()
	h.prev, h.next = nil, r.head
	if r.head != nil {
		r.head.prev = h
	}
	r.head = h
	r.n++
	draining, cut, retired := r.draining, r.cut, r.retired[n]
	r.mu.Unlock()
	t := h.t
	switch {
	case cut:
		t.Abort()
	case draining:
		go t.GoAway(tunnelGoAwayCode, "gateway shutting down")
	case retired:
		go t.GoAway(tunnelGoAwayCode, "node leaving")
	}
}

// retire marks n as leaving (removed by a reload, or drained with its
// clients moved), so a tunnel to it that a handshake in flight still
// registers goes away at once, and returns n's live tunnels.
func (r *registry) retire(n *balancer.Node) []*tunnel.Tunnel {
	r.mu.Lock()
	if r.retired == nil {
		r.retired = make(map[*balancer.Node]bool)
	}
	r.retired[n] = true
	r.mu.Unlock()
	return r.snapshot(n)
}

// pruneRetired forgets the leaving nodes that hold no tunnel any more and
// that keep does not name (nodes still in the running config, which may
// be undrained), so the set does not grow with every reload.
func (r *registry) pruneRetired(keep func(*balancer.Node) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.retired) == 0 {
		return
	}
	busy := make(map[*balancer.Node]bool, len(r.retired))
	for h := r.head; h != nil; h = h.next {
		if n := h.node(); r.retired[n] {
			busy[n] = true
		}
	}
	for n := range r.retired {
		if !busy[n] && !keep(n) {
			delete(r.retired, n)
		}
	}
}

// retiredLen is how many nodes are marked leaving.
func (r *registry) retiredLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.retired)
}

// unretire lets n keep new tunnels again (an undrained node).
func (r *registry) unretire(n *balancer.Node) {
	r.mu.Lock()
	delete(r.retired, n)
	r.mu.Unlock()
}

// remove retires an ended tunnel, folding its counters into the totals
// under the same lock a scrape takes, so no scrape counts it twice. It
// reports whether h was live.
func (r *registry) remove(h *hold, st tunnel.Stats) bool {
	r.mu.Lock()
	ok := r.linked(h)
	if ok {
		if h.expiry != nil {
			h.expiry.Stop()
		}
		if h.prev != nil {
			h.prev.next = h.next
		} else {
			r.head = h.next
		}
		if h.next != nil {
			h.next.prev = h.prev
		}
		h.prev, h.next = nil, nil
		r.n--
	}
	r.ended.FramesToNode += st.FramesToNode
	r.ended.FramesToClient += st.FramesToClient
	r.ended.BytesToNode += st.BytesToNode
	r.ended.BytesToClient += st.BytesToClient
	r.signalEmpty()
	leaving := len(r.retired) > 0 && r.retired[h.node()]
	r.mu.Unlock()
	// The tunnel released its lease before it ended: a leaving node with
	// none left has no tunnel left either.
	if leaving && r.idle != nil && h.node().Live() == 0 {
		r.idle()
	}
	return ok
}

// linked reports whether h is in the live list. Called with mu held.
func (r *registry) linked(h *hold) bool { return h.prev != nil || r.head == h }

// reserve counts a handshake that is about to become a tunnel: its 101 may
// reach the client before add, and a drain's wait must not end in between
// (the tunnel, once added, is told to go away like the others). Every
// reserve is matched by one unreserve, after add or instead of it.
func (r *registry) reserve() {
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
}

// unreserve ends a reservation of reserve.
func (r *registry) unreserve() {
	r.mu.Lock()
	r.pending--
	r.signalEmpty()
	r.mu.Unlock()
}

// signalEmpty wakes wait once no tunnel is live and none is reserved.
// Called with mu held.
func (r *registry) signalEmpty() {
	if r.n == 0 && r.pending == 0 && r.empty != nil {
		close(r.empty)
		r.empty = nil
	}
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// totals returns frames and bytes forwarded so far by every tunnel, live
// or ended. Tunnel.Stats reads atomics and takes no lock, so a scrape never
// waits on a tunnel, however stuck its peers are, and never holds r.mu for
// longer than the sum takes.
func (r *registry) totals() tunnel.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := r.ended
	for h := r.head; h != nil; h = h.next {
		st := h.t.Stats()
		sum.FramesToNode += st.FramesToNode
		sum.FramesToClient += st.FramesToClient
		sum.BytesToNode += st.BytesToNode
		sum.BytesToClient += st.BytesToClient
	}
	return sum
}

// snapshot returns the live tunnels, of node n only when n is not nil.
func (r *registry) snapshot(n *balancer.Node) []*tunnel.Tunnel {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([]*tunnel.Tunnel, 0, r.n)
	for h := r.head; h != nil; h = h.next {
		if n == nil || h.node() == n {
			ts = append(ts, h.t)
		}
	}
	return ts
}

// drainAll marks the registry draining and tells every live tunnel to go
// away, spread over window (see spread).
func (r *registry) drainAll(ctx context.Context, window time.Duration, reason string) int {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	return spread(ctx, r.snapshot(nil), window, reason)
}

// spread tells tunnel i of n to go away at i*window/n, so clients reconnect
// elsewhere in a trickle rather than a storm. It returns the number told;
// it stops early when ctx ends.
func spread(ctx context.Context, ts []*tunnel.Tunnel, window time.Duration, reason string) int {
	start := time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i, t := range ts {
		at := start.Add(window * time.Duration(i) / time.Duration(len(ts)))
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return i
			}
		}
		go t.GoAway(tunnelGoAwayCode, reason)
	}
	return len(ts)
}

// wait blocks until no tunnel is left and no handshake is reserved, or ctx
// ends, and returns how many tunnels are left.
func (r *registry) wait(ctx context.Context) int {
	r.mu.Lock()
	if r.n == 0 && r.pending == 0 {
		r.mu.Unlock()
		return 0
	}
	if r.empty == nil {
		r.empty = make(chan struct{})
	}
	empty := r.empty
	r.mu.Unlock()
	select {
	case <-empty:
		return 0
	case <-ctx.Done():
		return r.len()
	}
}

// revoke tells the tunnels of subject, or of the credential key, to go
// away with 1008 and returns how many there were; an empty argument
// matches nothing.
func (r *registry) revoke(subject, key string) int {
	r.mu.Lock()
	var ts []*tunnel.Tunnel
	for h := r.head; h != nil; h = h.next {
		if e := h.info(); (subject != "" && e.subject == subject) || (key != "" && e.key == key) {
			ts = append(ts, h.t)
		}
	}
	r.mu.Unlock()
	for _, t := range ts {
		go t.GoAway(tunnel.CodePolicy, "credential revoked")
	}
	return len(ts)
}

// abortAll cuts every live tunnel, and every tunnel added from now on.
func (r *registry) abortAll() {
	r.mu.Lock()
	r.cut = true
	r.mu.Unlock()
	for _, t := range r.snapshot(nil) {
		t.Abort()
	}
}
