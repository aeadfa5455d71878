package acmecert

import (
	"container/list"
	"sync"
	"time"
)

// How long the ask URL's answers are remembered, and how many. An
// approved name's certificate is loaded again (after the cache evicted
// it) and renewed on demand at handshakes, each time with the decision
// asked again: within approvedFor of the approval neither the ask URL nor
// the on_demand_rate bucket is asked. A refusal is remembered only for a
// name whose certificate is in the storage (see Manager.decide), for
// refusedFor, so that a stranger asking for it again and again does not
// make an ask call each time.
const (
	approvedFor  = time.Hour
	refusedFor   = time.Minute
	approvalsMax = 10000
)

// How long a name the storage was found to hold no certificate for is
// taken as absent without asking the storage again, and how many such
// names are remembered. Over the on_demand_rate, every handshake for a
// stranger's name looked the name up in the storage (two Redis round
// trips with a Redis storage): a flood of handshakes for a few names
// would cost the Redis as much. A certificate stored meanwhile (by
// another gateway of the fleet) is found absentFor later at most.
const (
	absentFor = 10 * time.Second
	absentMax = 10000
)

// recentNames remembers a value by name for a while, each for as long as
// its ttl says, the most recent max of them (the least recently noted go
// first): the ask URL's answers (bool: approved) and the names the
// storage was found not to hold (struct{}). It is safe for concurrent
// use.
type recentNames[V any] struct {
	mu     sync.Mutex
	byName map[string]*list.Element // of *remembered[V]
	order  list.List                // front: the most recently noted
	max    int
	ttl    func(V) time.Duration
}

// remembered is one value noted for a name at a time.
type remembered[V any] struct {
	name string
	v    V
	at   time.Time
}

func newRecentNames[V any](max int, ttl func(V) time.Duration) *recentNames[V] {
	return &recentNames[V]{byName: map[string]*list.Element{}, max: max, ttl: ttl}
}

// newApprovals remembers the ask URL's answers: an approval for
// approvedFor, a refusal for refusedFor.
func newApprovals(max int) *recentNames[bool] {
	return newRecentNames(max, func(ok bool) time.Duration {
		if ok {
			return approvedFor
		}
		return refusedFor
	})
}

// newAbsentNames remembers names found absent, each for absentFor.
func newAbsentNames(max int) *recentNames[struct{}] {
	return newRecentNames(max, func(struct{}) time.Duration { return absentFor })
}

// get returns the value noted for name if it is still valid at now.
func (r *recentNames[V]) get(name string, now time.Time) (v V, known bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el := r.byName[name]
	if el == nil {
		return v, false
	}
	e := el.Value.(*remembered[V])
	if now.Sub(e.at) >= r.ttl(e.v) || now.Before(e.at) {
		r.order.Remove(el)
		delete(r.byName, name)
		return v, false
	}
	return e.v, true
}

// note remembers v for name at now, forgetting the least recently noted
// name if there are max already.
func (r *recentNames[V]) note(name string, v V, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el := r.byName[name]; el != nil {
		el.Value = &remembered[V]{name, v, now}
		r.order.MoveToFront(el)
		return
	}
	if r.order.Len() >= r.max {
		oldest := r.order.Back()
		r.order.Remove(oldest)
		delete(r.byName, oldest.Value.(*remembered[V]).name)
	}
	r.byName[name] = r.order.PushFront(&remembered[V]{name, v, now})
}
