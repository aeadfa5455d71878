package revoke

import (
	"sync"
	"time"
)

// revokedSet remembers revoked subjects until their TTL passes, so a
// client whose tunnel was closed cannot reconnect on a cached decision.
type revokedSet struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// add refuses subject (a "s:" or "k:" name) until the later of until and
// what it held for it, and reports whether subject was not refused before.
func (r *revokedSet) add(subject string, until time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.until == nil {
		r.until = make(map[string]time.Time)
	}
	if u, ok := r.until[subject]; ok {
		if until.After(u) {
			r.until[subject] = until
		}
		return !time.Now().Before(u)
	}
	if len(r.until) >= maxRevoked {
		now := time.Now()
		var soonest string
		for s, u := range r.until {
			if u.Before(now) {
				delete(r.until, s)
			} else if soonest == "" || u.Before(r.until[soonest]) {
				soonest = s
			}
		}
		if len(r.until) >= maxRevoked {
			delete(r.until, soonest)
		}
	}
	r.until[subject] = until
	return true
}

// has reports whether subject (a "s:" or "k:" name) is revoked now.
func (r *revokedSet) has(subject string) bool {
	if len(subject) <= 2 { // "s:" or "k:" with nothing after it
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.until[subject]
	if ok && time.Now().After(u) {
		delete(r.until, subject)
		return false
	}
	return ok
}
