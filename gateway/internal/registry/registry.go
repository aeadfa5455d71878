// Package registry holds a gateway's live tunnels: it adds and removes
// them as handshakes finish and tunnels end, drains them all or one node's
// (spread over a window), cuts them, closes the ones a revocation names,
// and hands the rebalancer a node's oldest. Every question it answers costs
// time in proportion to the tunnels it concerns, never to the others: the
// tunnels are indexed by node and by credential, and the counts a scrape
// reads are kept as they change.
package registry

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// GoAwayCode is the close code of a planned drain (going away).
const GoAwayCode = tunnel.CodeGoingAway

// Tunnels holds every live tunnel with the node it runs to, so a drain
// reaches all of them (or all of one node's), and the totals of what they
// forwarded, live and ended. A tunnel added while a drain
// runs is told to go away at once, and cut at once once the drain has cut
// the tunnels left (a handshake still in flight then). The zero value is
// ready to use.
//
// The live tunnels are lists threaded through their entries: every
// tunnel's, each node's, and each credential's (no map entry per tunnel:
// an idle tunnel costs the registry four pointers of its entry, and adding
// one allocates nothing once its node has a list).
type Tunnels struct {
	mu       sync.Mutex
	head     *Entry // every live tunnel, newest first
	n        int    // how many are live
	byNode   map[*balancer.Node]*nodeList
	bySubj   map[string]*Entry       // heads of the lists of one credential subject
	byKey    map[string]*Entry       // heads of the lists of one credential id
	retired  map[*balancer.Node]bool // nodes leaving: removed, or drained with migrate
	draining bool
	cut      bool          // the drain timeout passed: AbortAll ran
	pending  int           // handshakes reserved and not yet added (see Reserve)
	empty    chan struct{} // made by Wait, closed when live and pending are both empty
	// counters are the frames and bytes every tunnel forwarded, live or
	// ended, counted by the tunnels themselves (tunnel.Params.Counters).
	counters tunnel.Counters
	// idle, when set, is called (without mu) when the last tunnel to a
	// leaving node has ended and its lease with it: the node may now be
	// forgotten, with its metric series.
	idle func()
}

// nodeList is one node's live tunnels, newest first.
type nodeList struct {
	head *Entry
	n    int
}

// OnIdle sets the func called, without the registry's lock, when the last
// tunnel to a leaving node has ended and released its lease. Call it
// before the first Add.
func (r *Tunnels) OnIdle(f func()) { r.idle = f }

// Add registers e's tunnel (SetTunnel was called).
func (r *Tunnels) Add(e *Entry) {
	n := e.Node()
	r.mu.Lock()
	r.link(e, n)
	draining, cut, retired := r.draining, r.cut, r.retired[n]
	r.mu.Unlock()
	t := e.t
	switch {
	case cut:
		t.Abort()
	case draining:
		go t.GoAway(GoAwayCode, "gateway shutting down")
	case retired:
		go t.GoAway(GoAwayCode, "node leaving")
	}
}

// link puts e at the head of every list it belongs on. Called with mu held.
func (r *Tunnels) link(e *Entry, n *balancer.Node) {
	e.prev, e.next = nil, r.head
	if r.head != nil {
		r.head.prev = e
	}
	r.head = e
	r.n++

	if r.byNode == nil {
		r.byNode = make(map[*balancer.Node]*nodeList)
	}
	nl := r.byNode[n]
	if nl == nil {
		nl = &nodeList{}
		r.byNode[n] = nl
	}
	e.nodePrev, e.nodeNext = nil, nl.head
	if nl.head != nil {
		nl.head.nodePrev = e
	}
	nl.head = e
	nl.n++

	if in := e.info; in != nil {
		if in.Subject != "" {
			r.bySubj = pushCred(r.bySubj, in.Subject, e, subjectLinks)
		}
		if in.Key != "" {
			r.byKey = pushCred(r.byKey, in.Key, e, keyLinks)
		}
	}
}

// unlink takes e off every list it is on. Called with mu held.
func (r *Tunnels) unlink(e *Entry, n *balancer.Node) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		r.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
	r.n--

	nl := r.byNode[n]
	if e.nodePrev != nil {
		e.nodePrev.nodeNext = e.nodeNext
	} else {
		nl.head = e.nodeNext
	}
	if e.nodeNext != nil {
		e.nodeNext.nodePrev = e.nodePrev
	}
	e.nodePrev, e.nodeNext = nil, nil
	if nl.n--; nl.n == 0 {
		delete(r.byNode, n)
	}

	if in := e.info; in != nil {
		if in.Subject != "" {
			dropCred(r.bySubj, in.Subject, e, subjectLinks)
		}
		if in.Key != "" {
			dropCred(r.byKey, in.Key, e, keyLinks)
		}
	}
}

// credLinks returns the prev and next links of an entry in one of the
// credential lists.
type credLinks func(*Entry) (prev, next **Entry)

func subjectLinks(e *Entry) (prev, next **Entry) { return &e.info.subjectPrev, &e.info.subjectNext }
func keyLinks(e *Entry) (prev, next **Entry)     { return &e.info.keyPrev, &e.info.keyNext }

// pushCred puts e at the head of the list of name in heads, making heads
// if it is nil, and returns heads.
func pushCred(heads map[string]*Entry, name string, e *Entry, links credLinks) map[string]*Entry {
	if heads == nil {
		heads = make(map[string]*Entry)
	}
	prev, next := links(e)
	*prev, *next = nil, heads[name]
	if old := heads[name]; old != nil {
		oldPrev, _ := links(old)
		*oldPrev = e
	}
	heads[name] = e
	return heads
}

// dropCred takes e off the list of name in heads.
func dropCred(heads map[string]*Entry, name string, e *Entry, links credLinks) {
	prev, next := links(e)
	if *prev != nil {
		_, pn := links(*prev)
		*pn = *next
	} else if *next != nil {
		heads[name] = *next
	} else {
		delete(heads, name)
	}
	if *next != nil {
		np, _ := links(*next)
		*np = *prev
	}
	*prev, *next = nil, nil
}

// Retire marks n as leaving (removed by a reload, or drained with its
// clients moved), so a tunnel to it that a handshake in flight still
// registers goes away at once, and returns n's live tunnels.
func (r *Tunnels) Retire(n *balancer.Node) []*tunnel.Tunnel {
	r.mu.Lock()
	if r.retired == nil {
		r.retired = make(map[*balancer.Node]bool)
	}
	r.retired[n] = true
	r.mu.Unlock()
	return r.Snapshot(n)
}

// PruneRetired forgets the leaving nodes that hold no tunnel any more and
// that keep does not name (nodes still in the running config, which may
// be undrained), so the set does not grow with every reload.
func (r *Tunnels) PruneRetired(keep func(*balancer.Node) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n := range r.retired {
		if r.byNode[n] == nil && !keep(n) {
			delete(r.retired, n)
		}
	}
}

// RetiredLen is how many nodes are marked leaving.
func (r *Tunnels) RetiredLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.retired)
}

// Leaving reports whether n is marked leaving: a tunnel added to it is
// told to go away at once.
func (r *Tunnels) Leaving(n *balancer.Node) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retired[n]
}

// Unretire lets n keep new tunnels again (an undrained node).
func (r *Tunnels) Unretire(n *balancer.Node) {
	r.mu.Lock()
	delete(r.retired, n)
	r.mu.Unlock()
}

// Counters are what every tunnel made for this registry counts into (its
// tunnel.Params.Counters), for Totals.
func (r *Tunnels) Counters() *tunnel.Counters { return &r.counters }

// Remove retires an ended tunnel. It reports whether e was live.
func (r *Tunnels) Remove(e *Entry) bool {
	n := e.Node()
	r.mu.Lock()
	ok := r.linked(e)
	if ok {
		if e.expiry != nil {
			e.expiry.Stop()
		}
		r.unlink(e, n)
	}
	r.signalEmpty()
	leaving := len(r.retired) > 0 && r.retired[n]
	r.mu.Unlock()
	// The tunnel released its lease before it ended: a leaving node with
	// none left has no tunnel left either.
	if leaving && r.idle != nil && n.Live() == 0 {
		r.idle()
	}
	return ok
}

// linked reports whether e is in the live list. Called with mu held.
func (r *Tunnels) linked(e *Entry) bool { return e.prev != nil || r.head == e }

// Reserve counts a handshake that is about to become a tunnel: its 101 may
// reach the client before Add, and a drain's Wait must not end in between
// (the tunnel, once added, is told to go away like the others). Every
// Reserve is matched by one Unreserve, after Add or instead of it.
func (r *Tunnels) Reserve() {
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
}

// Unreserve ends a reservation of Reserve.
func (r *Tunnels) Unreserve() {
	r.mu.Lock()
	r.pending--
	r.signalEmpty()
	r.mu.Unlock()
}

// signalEmpty wakes Wait once no tunnel is live and none is reserved.
// Called with mu held.
func (r *Tunnels) signalEmpty() {
	if r.n == 0 && r.pending == 0 && r.empty != nil {
		close(r.empty)
		r.empty = nil
	}
}

// Len is the number of live tunnels.
func (r *Tunnels) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Totals returns frames and bytes forwarded so far by every tunnel made
// with Counters, live or ended. The tunnels count as they forward, so a
// scrape reads a few atomics: it takes no lock, visits no tunnel and costs
// the same at ten tunnels as at a million.
func (r *Tunnels) Totals() tunnel.Stats { return r.counters.Totals() }

// Snapshot returns the live tunnels, newest first; of node n only when n
// is not nil.
func (r *Tunnels) Snapshot(n *balancer.Node) []*tunnel.Tunnel {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == nil {
		ts := make([]*tunnel.Tunnel, 0, r.n)
		for e := r.head; e != nil; e = e.next {
			ts = append(ts, e.t)
		}
		return ts
	}
	nl := r.byNode[n]
	if nl == nil {
		return nil
	}
	ts := make([]*tunnel.Tunnel, 0, nl.n)
	for e := nl.head; e != nil; e = e.nodeNext {
		ts = append(ts, e.t)
	}
	return ts
}

// DrainAll marks the registry draining and tells every live tunnel to go
// away, spread over window (see Spread).
func (r *Tunnels) DrainAll(ctx context.Context, window time.Duration, reason string) int {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	return Spread(ctx, r.Snapshot(nil), window, reason)
}

// Spread tells tunnel i of n to go away at i*window/n, so clients reconnect
// elsewhere in a trickle rather than a storm. It returns the number told;
// it stops early when ctx ends.
func Spread(ctx context.Context, ts []*tunnel.Tunnel, window time.Duration, reason string) int {
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
		go t.GoAway(GoAwayCode, reason)
	}
	return len(ts)
}

// Wait blocks until no tunnel is left and no handshake is reserved, or ctx
// ends, and returns how many tunnels are left.
func (r *Tunnels) Wait(ctx context.Context) int {
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
		return r.Len()
	}
}

// Revoke tells the tunnels of subject, or of the credential key, to go
// away with 1008 and returns how many there were; an empty argument
// matches nothing. It walks only the tunnels it names.
func (r *Tunnels) Revoke(subject, key string) int {
	var ts []*tunnel.Tunnel
	r.mu.Lock()
	if subject != "" {
		for e := r.bySubj[subject]; e != nil; e = e.info.subjectNext {
			ts = append(ts, e.t)
		}
	}
	if key != "" {
		for e := r.byKey[key]; e != nil; e = e.info.keyNext {
			if subject == "" || e.info.Subject != subject { // not counted twice
				ts = append(ts, e.t)
			}
		}
	}
	r.mu.Unlock()
	for _, t := range ts {
		go t.GoAway(tunnel.CodePolicy, "credential revoked")
	}
	return len(ts)
}

// AbortAll cuts every live tunnel, and every tunnel added from now on.
func (r *Tunnels) AbortAll() {
	r.mu.Lock()
	r.cut = true
	r.mu.Unlock()
	for _, t := range r.Snapshot(nil) {
		t.Abort()
	}
}

// Oldest returns, for every node of want, its live tunnels oldest first
// (in the order they were registered, a moment after their 101), at most
// twice as many as want names plus a few, room for tunnels that end before
// their turn. It walks only those nodes' lists, under the lock; each list
// runs newest first, so each node's run is reversed outside it.
func (r *Tunnels) Oldest(want map[*balancer.Node]int) map[*balancer.Node][]*tunnel.Tunnel {
	out := make(map[*balancer.Node][]*tunnel.Tunnel, len(want))
	r.mu.Lock()
	for n, k := range want {
		nl := r.byNode[n]
		if k <= 0 || nl == nil {
			continue
		}
		ts := make([]*tunnel.Tunnel, 0, nl.n)
		for e := nl.head; e != nil; e = e.nodeNext {
			ts = append(ts, e.t)
		}
		out[n] = ts
	}
	r.mu.Unlock()
	for n, ts := range out {
		slices.Reverse(ts)
		out[n] = ts[:min(len(ts), 2*want[n]+16)]
	}
	return out
}

// Alive reports whether t is live.
func (r *Tunnels) Alive(t *tunnel.Tunnel) bool {
	e := entryOf(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.linked(e)
}

// Holds reports whether t is live and runs to n.
func (r *Tunnels) Holds(t *tunnel.Tunnel, n *balancer.Node) bool {
	e := entryOf(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.linked(e) && e.Node() == n
}
