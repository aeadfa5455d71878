package pluginhost

import (
	"container/list"
	"sync"
	"time"

	"github.com/wsgate/wsgate/plugins/auth"
)

// cacheKey identifies one cached decision: the plugin instance generation
// (so a reload or restart with a new config never serves an old decision)
// and the SHA-256 of the request parts the plugin named.
type cacheKey struct {
	gen uint64
	sum [32]byte
}

type cacheEntry struct {
	key   cacheKey
	d     *auth.Decision
	until time.Time
}

// decisionCache is a size-bounded LRU of decisions with per-entry expiry.
// It is safe for concurrent use.
type decisionCache struct {
	mu  sync.Mutex
	max int
	ll  list.List // front = most recently used; values are *cacheEntry
	m   map[cacheKey]*list.Element
}

func newDecisionCache(max int) *decisionCache {
	return &decisionCache{max: max, m: make(map[cacheKey]*list.Element)}
}

// get returns the live decision under k.
func (c *decisionCache) get(k cacheKey, now time.Time) (*auth.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.until) {
		c.ll.Remove(el)
		delete(c.m, k)
		return nil, false
	}
	c.ll.MoveToFront(el)
	return e.d, true
}

// put stores d under k until until, evicting the least recently used entry
// when full.
func (c *decisionCache) put(k cacheKey, d *auth.Decision, until time.Time) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		e := el.Value.(*cacheEntry)
		e.d, e.until = d, until
		c.ll.MoveToFront(el)
		return
	}
	for c.ll.Len() >= c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*cacheEntry).key)
	}
	c.m[k] = c.ll.PushFront(&cacheEntry{key: k, d: d, until: until})
}

// len is the number of entries, live or not yet found expired.
func (c *decisionCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
