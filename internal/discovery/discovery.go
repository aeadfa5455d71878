package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Node is one node a source found: its host:port and its relative weight
// (1..1000).
type Node struct {
	Addr   string
	Weight int
}

// Source answers which nodes are there now. Lookup returns [ErrEmpty]
// (possibly wrapped) when the source answered and named no node.
type Source interface {
	Lookup(ctx context.Context) ([]Node, error)
}

// ErrEmpty is returned by a lookup that succeeded but found no node (a DNS
// name without records, no relay key in Redis). A [Watcher] treats it as
// a failure and keeps the last good set: a pool is never emptied by
// discovery, and its health checks take out nodes that are truly gone.
var ErrEmpty = errors.New("discovery: the answer names no node")

// The results a Watcher reports to its Options.Observe.
const (
	ResultOK    = "ok"    // the lookup found at least one node
	ResultEmpty = "empty" // it answered with no node; the last good set stays
	ResultError = "error" // it failed; the last good set stays
)

// MinWeight and MaxWeight bound a node's weight, as for configured nodes.
const (
	MinWeight = 1
	MaxWeight = 1000
)

// MaxNodes bounds the nodes one answer may name. An answer with more
// (a DNS name or a Redis prefix filled by mistake or on purpose) is a
// failed lookup: the last good set stays, rather than the pool growing
// to as many nodes, each health-checked and holding its own state.
const MaxNodes = 1000

// ErrTooMany is returned (wrapped) by a lookup whose answer names more
// than MaxNodes distinct nodes.
var ErrTooMany = fmt.Errorf("discovery: the answer names more than %d nodes", MaxNodes)

// Options configure a Watcher.
type Options struct {
	// Interval is the time between two lookups; required, > 0.
	Interval time.Duration
	// Timeout bounds one lookup (default Interval).
	Timeout time.Duration
	// Apply receives every set that differs from the last one it took,
	// sorted by address. An error leaves the set untaken: the next
	// lookup offers it again. Required.
	Apply func(nodes []Node) error
	// Observe hears every lookup's result and, for ResultOK, how many
	// nodes it found (default none).
	Observe func(result string, nodes int)
	// Log receives one line when lookups start failing, with the error,
	// and one when they recover (default: discarded).
	Log *slog.Logger
	// Misses is how many answers in a row must leave a node out before
	// it leaves the set (default 1: the first answer without it). A
	// source that answers with a changing subset of its nodes (DNS
	// servers that rotate or cap their records) would otherwise have a
	// node removed, and its tunnels drained, at every other lookup. Only
	// answers that name nodes count; failures and empty answers keep the
	// set as it is.
	Misses int
}

// Watcher asks one source every interval. Create it with Watch; it runs
// until Stop. It is safe for concurrent use.
type Watcher struct {
	src    Source
	opt    Options
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{}
	once   sync.Once
}

// Watch starts a watcher that looks src up at once and then every
// opt.Interval.
func Watch(src Source, opt Options) *Watcher {
	if opt.Timeout <= 0 {
		opt.Timeout = opt.Interval
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	opt.Misses = max(opt.Misses, 1)
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{src: src, opt: opt, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go w.loop()
	return w
}

// Stop ends the watcher's lookups. It does not wait for a lookup or an
// Apply in flight (an Apply may wait on a lock its caller holds); Done is
// closed once the watcher's goroutine has ended.
func (w *Watcher) Stop() { w.once.Do(w.cancel) }

// Done is closed when the watcher's goroutine has ended, after Stop.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// loop runs lookups until Stop.
func (w *Watcher) loop() {
	defer close(w.done)
	var (
		taken   []Node         // the last set Apply took
		missed  map[string]int // answers in a row without a node of taken
		failing bool           // the last lookup failed: said once in the log
	)
	tick := time.NewTicker(w.opt.Interval)
	defer tick.Stop()
	for {
		nodes, err := w.lookup()
		if w.ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			result := ResultError
			if errors.Is(err, ErrEmpty) {
				result = ResultEmpty
			}
			w.observe(result, 0)
			if !failing {
				failing = true
				w.opt.Log.Error("discovery lookup failed; the last good set of nodes stays", "err", err, "nodes", len(taken))
			}
		default:
			w.observe(ResultOK, len(nodes))
			if failing {
				failing = false
				w.opt.Log.Info("discovery lookups answer again", "nodes", len(nodes))
			}
			nodes, missed = keepMissing(nodes, taken, missed, w.opt.Misses)
			if !slices.Equal(nodes, taken) {
				if err := w.opt.Apply(nodes); err != nil {
					w.opt.Log.Error("discovered nodes not applied; trying again at the next lookup", "err", err)
				} else {
					taken = nodes
				}
			}
		}
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// lookup asks the source once, within the timeout, and returns its
// nodes sorted by address, without duplicates, weights held to
// [MinWeight, MaxWeight]; no node at all is ErrEmpty.
func (w *Watcher) lookup() ([]Node, error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.opt.Timeout)
	defer cancel()
	nodes, err := w.src.Lookup(ctx)
	if err != nil {
		return nil, err
	}
	nodes = normalize(nodes)
	if len(nodes) == 0 {
		return nil, ErrEmpty
	}
	if len(nodes) > MaxNodes {
		return nil, fmt.Errorf("%w (%d)", ErrTooMany, len(nodes))
	}
	return nodes, nil
}

// keepMissing returns answer plus the nodes of taken it leaves out that
// have been missing from fewer than misses answers in a row (with their
// weight in taken), sorted by address, and the updated counts of misses.
// The nodes kept never take the set past MaxNodes.
func keepMissing(answer, taken []Node, missed map[string]int, misses int) ([]Node, map[string]int) {
	next := map[string]int{}
	if misses <= 1 {
		return answer, next
	}
	out := answer
	for _, n := range taken {
		if _, found := slices.BinarySearchFunc(answer, n.Addr, func(a Node, addr string) int { return cmp.Compare(a.Addr, addr) }); found {
			continue
		}
		if k := missed[n.Addr] + 1; k < misses && len(out) < MaxNodes {
			if len(out) == len(answer) {
				out = slices.Clone(answer)
			}
			out = append(out, n)
			next[n.Addr] = k
		}
	}
	if len(out) != len(answer) {
		slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.Addr, b.Addr) })
	}
	return out, next
}

// normalize sorts nodes by address, keeps the first of each address and
// holds weights to [MinWeight, MaxWeight].
func normalize(nodes []Node) []Node {
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b Node) int { return cmp.Compare(a.Addr, b.Addr) })
	out = slices.CompactFunc(out, func(a, b Node) bool { return a.Addr == b.Addr })
	for i := range out {
		out[i].Weight = min(max(out[i].Weight, MinWeight), MaxWeight)
	}
	return out
}

func (w *Watcher) observe(result string, n int) {
	if w.opt.Observe != nil {
		w.opt.Observe(result, n)
	}
}
