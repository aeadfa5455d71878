// Package penalty keeps the back-off of peers cut for flooding: a peer
// (a client's address, a node) whose connection was cut is refused for a
// while, twice as long with each cut in a row, and forgiven step by step
// while it behaves. A cut connection costs the gateway its handshake and
// the work the flood made before the cut; without a back-off, a peer that
// comes back at once repeats both as fast as it can, and that churn, not
// the flood, is what others pay for.
package penalty

import (
	"sync"
	"time"
)

// Policy is how long a peer cut for flooding is refused: First after a
// first cut, doubling with each cut in a row up to Max. One step of the
// streak is forgiven for each Max that passes after a refusal ends
// without a cut, so a peer that behaves is back to First within
// (steps x Max). First <= 0 turns the back-off off.
type Policy struct {
	First, Max time.Duration
}

// On reports whether the policy refuses anyone.
func (p Policy) On() bool { return p.First > 0 }

// maxStreak bounds a streak, so that a shift never overflows and every
// record is forgiven within maxStreak x Max.
const maxStreak = 30

// length is how long a streak of n cuts is refused.
func (p Policy) length(n int) time.Duration {
	d := p.First
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	return min(d, max(p.Max, p.First))
}

// steps is the streak at which the refusal reaches Max: a longer one
// would take longer to forgive and refuse no longer.
func (p Policy) steps() int {
	n := 1
	for d := p.First; d < p.Max && n < maxStreak; d *= 2 {
		n++
	}
	return n
}

// Record is one peer's back-off. The zero value is a peer never cut. It
// is not safe for concurrent use: its owner locks.
type Record struct {
	streak int
	until  time.Time // refused before it
}

// streakAt is the streak at now, after what was forgiven since the last
// refusal ended (one step per p.Max).
func (r *Record) streakAt(now time.Time, p Policy) int {
	if r.streak == 0 || !now.After(r.until) || p.Max <= 0 {
		return r.streak
	}
	k := int(min(now.Sub(r.until)/p.Max, maxStreak))
	return max(r.streak-k, 0)
}

// Cut notes a cut at now and returns how long the peer is refused from
// now, and its streak (1 for a first cut). A cut while the peer is
// refused (a connection it opened before) doubles the refusal too.
func (r *Record) Cut(now time.Time, p Policy) (time.Duration, int) {
	if !p.On() {
		return 0, 0
	}
	r.streak = min(r.streakAt(now, p)+1, p.steps())
	d := p.length(r.streak)
	r.until = now.Add(d)
	return d, r.streak
}

// Left is how long the peer is still refused at now (0: it is not).
func (r *Record) Left(now time.Time) time.Duration {
	return max(r.until.Sub(now), 0)
}

// Forgiven reports whether the record says nothing any more at now: not
// refused, and its streak forgiven, so it may be dropped.
func (r *Record) Forgiven(now time.Time, p Policy) bool {
	return r.Left(now) == 0 && r.streakAt(now, p) == 0
}

// Table is the back-off of many peers, by key, bounded: it holds at most
// its capacity of records, those of peers cut lately (peers never cut
// have none), and drops a record once it is forgiven. Full, a new cut
// drops a record at random to make room, so an attacker with more
// addresses than the capacity can shorten its own addresses' refusals,
// but never grow the table or touch a peer that was not cut. It is safe
// for concurrent use.
type Table[K comparable] struct {
	mu       sync.Mutex
	policy   Policy
	capacity int
	m        map[K]*Record
}

// NewTable returns a table refusing by p, of at most capacity records
// (at least 1).
func NewTable[K comparable](p Policy, capacity int) *Table[K] {
	t := &Table[K]{m: make(map[K]*Record)}
	t.Set(p, capacity)
	return t
}

// Set replaces the policy and the capacity (a reload). The records kept
// are judged by the new policy from now on; a policy that is off drops
// them all, and a smaller capacity drops records at random.
func (t *Table[K]) Set(p Policy, capacity int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.policy, t.capacity = p, max(capacity, 1)
	if !p.On() {
		clear(t.m)
	}
	for k := range t.m {
		if len(t.m) <= t.capacity {
			break
		}
		delete(t.m, k)
	}
}

// sweepProbe is how many records a cut into a full table looks at for
// forgiven ones before it drops one at random.
const sweepProbe = 16

// Cut notes a cut of peer k at now and returns how long k is refused
// from now (0 when the policy is off) and its streak.
func (t *Table[K]) Cut(k K, now time.Time) (time.Duration, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.policy.On() {
		return 0, 0
	}
	r := t.m[k]
	if r == nil {
		t.makeRoomLocked(now)
		r = new(Record)
		t.m[k] = r
	}
	return r.Cut(now, t.policy)
}

// makeRoomLocked frees a place for one more record when the table is
// full: a forgiven record among the first sweepProbe the map yields (in
// no set order), or else the first of them. Called with t.mu held.
func (t *Table[K]) makeRoomLocked(now time.Time) {
	if len(t.m) < t.capacity {
		return
	}
	var victim K
	seen := 0
	for k, r := range t.m {
		if r.Forgiven(now, t.policy) {
			delete(t.m, k)
			return
		}
		if seen == 0 {
			victim = k
		}
		if seen++; seen == sweepProbe {
			break
		}
	}
	delete(t.m, victim)
}

// Left is how long peer k is still refused at now (0: it is not). A
// forgiven record it finds is dropped.
func (t *Table[K]) Left(k K, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[k]
	if r == nil {
		return 0
	}
	if r.Forgiven(now, t.policy) {
		delete(t.m, k)
		return 0
	}
	return r.Left(now)
}

// Sweep drops the forgiven records and returns how many are kept: peers
// refused now, or cut lately enough that their next cut still doubles.
// It walks the whole table; call it as often as the records are counted
// (a metrics scrape), not per connection.
func (t *Table[K]) Sweep(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.m {
		if r.Forgiven(now, t.policy) {
			delete(t.m, k)
		}
	}
	return len(t.m)
}
