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
