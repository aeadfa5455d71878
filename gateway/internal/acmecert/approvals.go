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

// approvals remembers the ask URL's answers by name, the most recent
// approvalsMax of them (the least recently answered go first). It is safe
// for concurrent use.
type approvals struct {
	mu     sync.Mutex
	byName map[string]*list.Element // of *approval
	order  list.List                // front: the most recent answer
	max    int
}

// approval is one answer of the ask URL.
type approval struct {
	name string
	ok   bool
	at   time.Time
}

func newApprovals(max int) *approvals {
	return &approvals{byName: map[string]*list.Element{}, max: max}
}

// answer is the answer remembered for name at now, if any is still
// valid: approved (ok) or refused.
func (a *approvals) answer(name string, now time.Time) (ok, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	el := a.byName[name]
	if el == nil {
		return false, false
	}
	ap := el.Value.(*approval)
	valid := approvedFor
	if !ap.ok {
		valid = refusedFor
	}
	if now.Sub(ap.at) >= valid || now.Before(ap.at) {
		a.order.Remove(el)
		delete(a.byName, name)
		return false, false
	}
	return ap.ok, true
}

// note remembers the answer ok for name at now, forgetting the oldest
// answer if there are max already.
func (a *approvals) note(name string, ok bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if el := a.byName[name]; el != nil {
		el.Value = &approval{name, ok, now}
		a.order.MoveToFront(el)
		return
	}
	if a.order.Len() >= a.max {
		oldest := a.order.Back()
		a.order.Remove(oldest)
		delete(a.byName, oldest.Value.(*approval).name)
	}
	a.byName[name] = a.order.PushFront(&approval{name, ok, now})
}

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

// absentNames remembers names the storage holds no certificate for, the
// most recent max of them, each for absentFor. It is safe for concurrent
// use.
type absentNames struct {
	mu     sync.Mutex
	byName map[string]*list.Element // of *absent
	order  list.List                // front: the most recent lookup
	max    int
}

// absent is one name found absent at a time.
type absent struct {
	name string
	at   time.Time
}

func newAbsentNames(max int) *absentNames {
	return &absentNames{byName: map[string]*list.Element{}, max: max}
}

// has reports whether name was found absent less than absentFor before
// now.
func (a *absentNames) has(name string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	el := a.byName[name]
	if el == nil {
		return false
	}
	at := el.Value.(*absent).at
	if now.Sub(at) >= absentFor || now.Before(at) {
		a.order.Remove(el)
		delete(a.byName, name)
		return false
	}
	return true
}

// note remembers name as found absent at now, forgetting the oldest if
// there are max already.
func (a *absentNames) note(name string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if el := a.byName[name]; el != nil {
		el.Value = &absent{name, now}
		a.order.MoveToFront(el)
		return
	}
	if a.order.Len() >= a.max {
		oldest := a.order.Back()
		a.order.Remove(oldest)
		delete(a.byName, oldest.Value.(*absent).name)
	}
	a.byName[name] = a.order.PushFront(&absent{name, now})
}
