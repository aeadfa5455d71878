package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/plugins/auth"
)

// Options tunes a Host. The zero value is usable.
type Options struct {
	// Logger receives plugin lifecycle events and every line a plugin
	// writes to stderr, tagged plugin=NAME (default slog.Default()).
	Logger *slog.Logger
	// Observer receives one event per plugin step (default none).
	Observer Observer
	// CacheSize bounds the decision cache, in entries across all plugins
	// (default 10_000; negative disables the cache).
	CacheSize int
	// StartTimeout bounds starting and configuring one plugin process
	// (default 10s).
	StartTimeout time.Duration
	// BackoffMin is the wait before restarting a crashed or hung plugin;
	// it doubles on each failed or short-lived restart (default 100ms).
	BackoffMin time.Duration
	// BackoffMax caps the restart wait (default 5s).
	BackoffMax time.Duration
	// HangAfter is how many consecutive call timeouts make a plugin count
	// as hung, so it is killed and restarted (default 3 calls).
	HangAfter int
}

// defaults fills in zero fields.
func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.CacheSize == 0 {
		o.CacheSize = 10_000
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(5*time.Second, o.BackoffMin)
	}
	if o.HangAfter <= 0 {
		o.HangAfter = 3
	}
}

// Result is the outcome of a route's auth chain.
type Result struct {
	// Allow is true when every plugin of the chain allowed the client.
	Allow bool
	// Status is the HTTP status to refuse with when Allow is false
	// (400-599).
	Status int
	// Reason is the denying plugin's reason, safe to send to the client.
	Reason string
	// DeniedBy names the plugin that refused.
	DeniedBy string
	// ResponseHeaders are the denying plugin's headers for the answer to
	// the client (a WWW-Authenticate challenge); nil on an allow. The map
	// may be shared with the cache: read it, never modify it.
	ResponseHeaders map[string]string
	// Headers are to be set on the upstream request, replacing the
	// client's headers of the same name; an empty value removes the
	// client's header. Later plugins in the chain override earlier ones.
	// The map may be shared with the cache: read it, never modify it.
	Headers map[string]string
	// AffinityKey is the first non-empty affinity key of the chain.
	AffinityKey string
	// Expires is the earliest credential expiry of the chain (zero: none
	// known).
	Expires time.Time
	// Subject is the first non-empty subject of the chain.
	Subject string
	// CredentialID is the first non-empty credential id of the chain.
	CredentialID string
}

// Host runs the auth plugins of a config. It is safe for concurrent use;
// Reload and Close are serialised with each other.
type Host struct {
	opts  Options
	cache *decisionCache
	slots atomic.Pointer[map[string]*slot]

	mu    sync.Mutex // serialises Commit, Discard and Close
	stage sync.Mutex // serialises Stage: one reload starts its plugins at a time
	// starting is the context every plugin start runs under; Close
	// cancels it, so a Stage in progress gives up at once.
	starting  context.Context
	cancel    context.CancelFunc
	closed    atomic.Bool
	closeOnce sync.Once
	retiring  sync.WaitGroup // slots replaced by Reload, being stopped
}

// New starts and configures every plugin of plugins, and returns when all
// are ready. If any fails (missing executable, checksum mismatch, rejected
// config, start timeout) none is left running and the error says which.
func New(plugins []conf.Plugin, opts Options) (*Host, error) {
	opts.defaults()
	h := &Host{opts: opts, cache: newDecisionCache(opts.CacheSize)}
	h.starting, h.cancel = context.WithCancel(context.Background())
	empty := map[string]*slot{}
	h.slots.Store(&empty)
	if err := h.Reload(plugins); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// Authenticate runs chain, the plugin names of a route's auth list, on req
// in order and stops at the first deny. Headers of the allowing plugins
// are merged. An empty chain allows.
//
// It returns an error whenever a plugin of the chain gave no valid
// decision: ErrUnavailable (not running, timed out, unreachable),
// ErrUnknownPlugin, ErrBadDecision, an error wrapping auth.ErrPlugin, or
// ctx's error. With an error, Result.Allow is false: the gateway must
// refuse the handshake (503), never let it through.
//
// req is read, never kept; Authenticate is safe for concurrent use.
func (h *Host) Authenticate(ctx context.Context, chain []string, req *auth.Request) (Result, error) {
	if len(chain) == 0 {
		return Result{Allow: true}, nil
	}
	if h.closed.Load() {
		return Result{}, fmt.Errorf("%w: host closed", ErrUnavailable)
	}
	slots := *h.slots.Load()
	var ks keyScratch
	res := Result{Allow: true}
	for _, name := range chain {
		s := slots[name]
		if s == nil {
			return Result{}, fmt.Errorf("%w: %q", ErrUnknownPlugin, name)
		}
		d, err := s.decide(ctx, req, &ks)
		if err != nil {
			return Result{}, err
		}
		if !d.Allow {
			return Result{Status: d.Status, Reason: d.Reason, DeniedBy: name, Subject: d.Subject, ResponseHeaders: d.ResponseHeaders}, nil
		}
		res.merge(d)
	}
	return res, nil
}

// merge folds an allowing decision into r.
func (r *Result) merge(d *auth.Decision) {
	switch {
	case len(d.Headers) == 0:
	case r.Headers == nil:
		r.Headers = d.Headers // shared, read-only
	default:
		m := make(map[string]string, len(r.Headers)+len(d.Headers))
		maps.Copy(m, r.Headers)
		maps.Copy(m, d.Headers)
		r.Headers = m
	}
	if r.AffinityKey == "" {
		r.AffinityKey = d.AffinityKey
	}
	if r.Subject == "" {
		r.Subject = d.Subject
	}
	if r.CredentialID == "" {
		r.CredentialID = d.CredentialID
	}
	if !d.Expires.IsZero() && (r.Expires.IsZero() || d.Expires.Before(r.Expires)) {
		r.Expires = d.Expires
	}
}

// Reload makes the running plugins match plugins. A plugin whose path,
// sha256 or config changed, and a new one, is started and configured
// first; only when every one of them is ready are they swapped in, and the
// ones they replace retire: calls already in flight finish on them, then
// they stop. Plugins no longer listed stop the same way. A changed timeout
// applies at once, without a restart. If any start fails, nothing changes
// and the error says which. It is Stage then Commit.
func (h *Host) Reload(plugins []conf.Plugin) error {
	st, err := h.Stage(plugins)
	if err != nil {
		return err
	}
	return st.Commit()
}

// Staged is the plugins of a reload started and configured but not yet
// serving: Commit swaps them in, Discard stops them. Staging takes as long
// as the slowest plugin's start (up to the start timeout); committing takes
// no time, so a caller stages outside its own locks and commits under
// them.
type Staged struct {
	h       *Host
	plugins []conf.Plugin
	base    *map[string]*slot // the slots in force when staged
	start   []conf.Plugin     // the plugins started for this reload
	started []*instance       // their processes, by index of start
	done    bool
}

// Stage starts and configures the plugins of plugins that are not running
// as listed (see Reload), without swapping them in. If any start fails,
// the others are stopped and the error says which. Stages are serialized:
// one waits for the one before it to start its plugins.
func (h *Host) Stage(plugins []conf.Plugin) (*Staged, error) {
	h.stage.Lock()
	defer h.stage.Unlock()
	if h.closed.Load() {
		return nil, errors.New("pluginhost: reload after close")
	}
	base := h.slots.Load()
	old := *base
	seen := make(map[string]bool, len(plugins))
	var start []conf.Plugin
	for _, p := range plugins {
		if seen[p.Name] {
			return nil, fmt.Errorf("pluginhost: plugin %q listed twice", p.Name)
		}
		seen[p.Name] = true
		if s := old[p.Name]; s == nil || !sameProcess(s.spec, p) {
			start = append(start, p)
		}
	}
	started := make([]*instance, len(start))
	errs := make([]error, len(start))
	var wg sync.WaitGroup
	for i, p := range start {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(h.starting, h.opts.StartTimeout)
			defer cancel()
			started[i], errs[i] = startInstance(ctx, p, &h.opts)
		})
	}
	wg.Wait()
	st := &Staged{h: h, plugins: plugins, base: base, start: start, started: started}
	if err := errors.Join(errs...); err != nil {
		st.Discard()
		return nil, err // each names its plugin; the caller adds its own context
	}
	if h.closed.Load() { // Close ran while they started
		st.Discard()
		return nil, errors.New("pluginhost: reload after close")
	}
	return st, nil
}

// Commit swaps the staged plugins in and retires the ones they replace. It
// fails, and stops the staged plugins, when the host was closed or another
// reload committed since Stage. It is the only call of a Staged that
// changes what serves, and it takes no time.
func (st *Staged) Commit() error {
	h := st.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.done {
		return errors.New("pluginhost: staged plugins committed or discarded already")
	}
	switch {
	case h.closed.Load():
		st.discard()
		return errors.New("pluginhost: reload after close")
	case h.slots.Load() != st.base:
		st.discard()
		return errors.New("pluginhost: the plugins changed since this reload started them")
	}
	st.done = true
	old := *st.base
	next := make(map[string]*slot, len(st.plugins))
	for _, p := range st.plugins {
		if s := old[p.Name]; s != nil && sameProcess(s.spec, p) {
			s.timeout.Store(int64(callTimeout(p)))
			next[p.Name] = s
		}
	}
	for i, p := range st.start {
		next[p.Name] = newSlot(h, p, st.started[i])
		h.opts.Logger.Info("auth plugin started", "plugin", p.Name, "path", p.Path, "plugin_pid", st.started[i].pid)
	}
	h.slots.Store(&next)
	for name, s := range old {
		if next[name] != s {
			h.retiring.Go(s.close)
		}
	}
	return nil
}

// Discard stops the staged plugins, which never served; after Commit it
// does nothing.
func (st *Staged) Discard() {
	st.h.mu.Lock()
	defer st.h.mu.Unlock()
	st.discard()
}

// discard is Discard with the host's mu held.
func (st *Staged) discard() {
	if st.done {
		return
	}
	st.done = true
	for _, in := range st.started {
		if in != nil {
			in.stop()
		}
	}
}

// sameProcess reports whether a running plugin for a can serve b.
func sameProcess(a, b conf.Plugin) bool {
	return a.Path == b.Path && strings.EqualFold(a.SHA256, b.SHA256) && reflect.DeepEqual(a.Config, b.Config) && a.ConfigDir == b.ConfigDir
}

// Close stops every plugin and waits for their processes to exit. Later
// Authenticate calls return ErrUnavailable. It is idempotent.
func (h *Host) Close() error {
	h.closeOnce.Do(h.close)
	return nil
}

// close is Close, once.
func (h *Host) close() {
	h.closed.Store(true)
	// A Stage in progress gives up its starts and stops what it started;
	// wait for it, so no process of this host outlives Close.
	h.cancel()
	h.stage.Lock()
	//lint:ignore SA2001 the empty critical section waits for a Stage in progress
	h.stage.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	empty := map[string]*slot{}
	old := *h.slots.Swap(&empty)
	for _, s := range old {
		h.retiring.Go(s.close)
	}
	h.retiring.Wait()
}

// PluginStatus is one plugin process as the admin API shows it.
type PluginStatus struct {
	Name    string `json:"name"`
	PID     int    `json:"pid"`     // 0 while not running
	Running bool   `json:"running"` // false while it is being restarted
}

// Status lists the plugins and their processes, sorted by name.
func (h *Host) Status() []PluginStatus {
	slots := *h.slots.Load()
	out := make([]PluginStatus, 0, len(slots))
	for name, s := range slots {
		st := PluginStatus{Name: name}
		if in := s.cur.Load(); in != nil && !in.exited() {
			st.PID, st.Running = in.pid, true
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
