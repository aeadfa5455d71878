package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUnknownNode is returned (wrapped with the address) by [Checker.Drain]
// and [Checker.Undrain] for an address the checker does not probe. Check
// the address against the pool's nodes.
var ErrUnknownNode = errors.New("health: unknown node")

// NodeStatus is a snapshot of one node's health, for the admin API.
type NodeStatus struct {
	// Addr is the node's host:port.
	Addr string
	// State is the node's current state.
	State State
	// LastCheck is when the last active probe finished (zero before the
	// first).
	LastCheck time.Time
	// LastLatency is the duration of the last probe, dial to answer or
	// failure.
	LastLatency time.Duration
	// LastResult says what the last probe got: "ok", "http 503 draining",
	// "http 200 agent drain", "http 500", "timeout", "refused", "reset",
	// "closed without an answer", "error: ...", or "not probed: REASON"
	// when the probe's own dial failed for a local reason (see
	// [LocalReason]), which leaves the node's state as it was.
	LastResult string
	// ConsecutiveFailures counts failed probes in a row.
	ConsecutiveFailures int
	// ConsecutivePasses counts passing probes in a row.
	ConsecutivePasses int
	// PassiveFailures counts failed dials and upstream handshakes in a row
	// since the last reported success.
	PassiveFailures int
	// AgentWeight is the weight the node's agent asked for, 0 for none.
	AgentWeight int
	// AgentLoad is the load the node's agent reported, 0 when it reported
	// none.
	AgentLoad int
	// AdminDrain is true between [Checker.Drain] and [Checker.Undrain].
	AdminDrain bool
}

// Checker probes the nodes of one pool and owns their state machine (see
// docs/health.md): active probes bring nodes down and up, passive reports
// eject them, drain signals and admin drains take them out of rotation.
//
// A Checker is safe for concurrent use and must not be copied. Each node is
// probed by its own goroutine until [Checker.Remove] or [Checker.Stop].
type Checker struct {
	_   noCopy
	cfg atomic.Pointer[Config] // swapped whole by SetConfig
	log *slog.Logger
	obs atomic.Pointer[observerBox]

	mu      sync.Mutex // guards nodes and stopped; never waits for a node's lock (Add locks a node not yet seen)
	nodes   map[string]*node
	stopped bool
	wg      sync.WaitGroup // one per probe goroutine
}

// node is one probed target. Everything below mu is guarded by it.
type node struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the probe goroutine ends

	mu           sync.Mutex // held while calling the target and StateChanged
	t            Target
	removed      bool
	st           NodeStatus
	lastPass     bool      // the last probe passed without a drain signal
	skipping     bool      // the last probe could not be made (see verdictSkip)
	undrained    bool      // Undrain: the next pass brings the node up
	ejectedUntil time.Time // end of the cool-down while StateEjected
}

type observerBox struct{ o Observer }

// noCopy makes go vet's copylocks check report copies of a Checker.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// NewChecker returns a checker for one pool with cfg's zero fields set to
// their defaults. A nil log discards the checker's log lines. It probes
// nothing until [Checker.Add].
func NewChecker(cfg Config, log *slog.Logger) *Checker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{log: log, nodes: make(map[string]*node)}
	c.SetConfig(cfg)
	return c
}

// SetObserver sets the receiver of probe and state events; nil removes it.
// Set it before the first Add to see every event.
func (c *Checker) SetObserver(o Observer) {
	if o == nil {
		c.obs.Store(nil)
		return
	}
	c.obs.Store(&observerBox{o})
}

func (c *Checker) observer() Observer {
	if b := c.obs.Load(); b != nil {
		return b.o
	}
	return nil
}

// conf returns the settings in force.
func (c *Checker) conf() *Config { return c.cfg.Load() }

// SetConfig replaces the checker's settings (zero fields defaulted as in
// NewChecker). Probes, passive counts and states carry on: each probe loop
// uses the new interval from its next wait, and the new rise, fall and
// ejection rules from the next result.
func (c *Checker) SetConfig(cfg Config) {
	cfg = cfg.withDefaults()
	c.cfg.Store(&cfg)
}

// AddPending starts probing t like Add, but the node starts [StateDown]:
// it takes traffic only after Rise passing probes. A reload adds nodes
// this way, so a new node proves itself before clients reach it.
func (c *Checker) AddPending(t Target) { c.add(t, StateDown) }

// Add starts probing t. The node starts in [StateUp] (optimistic, so a
// fresh gateway serves at once; Fall failed probes bring it down), and Add
// tells the target so with SetState(StateUp), so that a node reused from
// an earlier checker agrees with this one; that is not a transition and the
// observer does not hear it. Adding an address the checker already probes
// replaces its target and keeps its health; the new target is told the
// current state and agent weight. Add after Stop does nothing.
func (c *Checker) Add(t Target) { c.add(t, StateUp) }

func (c *Checker) add(t Target, initial State) {
	addr := t.Addr()
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	if n, ok := c.nodes[addr]; ok {
		c.mu.Unlock()
		n.mu.Lock()
		n.t = t
		t.SetState(n.st.State)
		t.SetAgentWeight(n.st.AgentWeight)
		n.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{addr: addr, cancel: cancel, done: make(chan struct{}), t: t,
		st: NodeStatus{Addr: addr, State: initial}}
	n.mu.Lock() // before the node is visible: nothing can come between
	c.nodes[addr] = n
	c.wg.Add(1)
	c.mu.Unlock()
	t.SetState(initial)
	n.mu.Unlock()
	go c.probeLoop(ctx, n)
}

// Remove stops probing addr and waits for its probe goroutine to end; the
// target hears nothing more from the checker. An unknown addr is ignored.
func (c *Checker) Remove(addr string) {
	c.mu.Lock()
	n, ok := c.nodes[addr]
	delete(c.nodes, addr)
	c.mu.Unlock()
	if !ok {
		return
	}
	n.mu.Lock()
	n.removed = true
	n.mu.Unlock()
	n.cancel()
	<-n.done
}

// Stop stops every probe, cancelling those in flight, and waits for their
// goroutines to end. Later calls to Add do nothing; Stop may be called more
// than once.
func (c *Checker) Stop() {
	c.mu.Lock()
	c.stopped = true
	for _, n := range c.nodes {
		n.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// lookup returns the node for addr, or nil.
func (c *Checker) lookup(addr string) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[addr]
}

// ReportSuccess records a passive success on addr (a dial and upstream
// handshake that worked): the count of passive failures restarts at 0. An
// unknown addr is ignored.
func (c *Checker) ReportSuccess(addr string) {
	n := c.lookup(addr)
	if n == nil {
		return
	}
	n.mu.Lock()
	n.st.PassiveFailures = 0
	n.mu.Unlock()
}

// ReportFailure records a passive failure on addr: a dial error, a timeout,
// or an upstream handshake answered with something other than 101 (a 5xx).
// EjectAfter of them in a row eject an up node for EjectFor. An unknown
// addr is ignored, and so is an err the dialing host caused (see
// [LocalReason]).
func (c *Checker) ReportFailure(addr string, err error) {
	if LocalReason(err) != "" {
		return // the dialing host's shortage, not the node's failure
	}
	n := c.lookup(addr)
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed {
		return
	}
	n.st.PassiveFailures++
	if n.st.State != StateUp || n.st.PassiveFailures < c.conf().EjectAfter {
		return
	}
	now := time.Now()
	n.ejectedUntil = now.Add(c.conf().EjectFor)
	n.st.ConsecutivePasses, n.st.ConsecutiveFailures = 0, 0
	n.lastPass = false
	c.transition(n, StateEjected, now, "passive failures", slog.Int("failures", n.st.PassiveFailures),
		slog.Duration("for", c.conf().EjectFor), slog.Any("err", err))
}

// Drain puts addr in admin drain: no new connections (draining, then
// drained once the target's Live is 0) whatever the probes say, until
// Undrain. Open tunnels are left alone. It returns an error wrapping
// [ErrUnknownNode] for an address the checker does not probe.
func (c *Checker) Drain(addr string) error {
	n := c.lookup(addr)
	if n == nil {
		return fmt.Errorf("drain %s: %w", addr, ErrUnknownNode)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed {
		return fmt.Errorf("drain %s: %w", addr, ErrUnknownNode)
	}
	n.st.AdminDrain = true
	n.undrained = false
	if s := n.st.State; s != StateDraining && s != StateDrained {
		c.transition(n, StateDraining, time.Now(), "admin drain")
	}
	c.settleDrain(n, time.Now())
	return nil
}

// Undrain ends an admin drain on addr and hands the node back to the
// probes: it is up at once if the last probe passed without a drain
// signal, else after the next passing probe. It returns an error wrapping
// [ErrUnknownNode] for an address the checker does not probe.
func (c *Checker) Undrain(addr string) error {
	n := c.lookup(addr)
	if n == nil {
		return fmt.Errorf("undrain %s: %w", addr, ErrUnknownNode)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed {
		return fmt.Errorf("undrain %s: %w", addr, ErrUnknownNode)
	}
	if !n.st.AdminDrain {
		return nil
	}
	n.st.AdminDrain = false
	if s := n.st.State; s != StateDraining && s != StateDrained {
		return nil
	}
	if n.lastPass {
		c.transition(n, StateUp, time.Now(), "admin undrain")
		return nil
	}
	n.undrained = true
	return nil
}

// Status returns a snapshot of addr's health, and false for an address the
// checker does not probe.
func (c *Checker) Status(addr string) (NodeStatus, bool) {
	n := c.lookup(addr)
	if n == nil {
		return NodeStatus{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st, true
}

// Statuses returns a snapshot of every node's health, sorted by address.
func (c *Checker) Statuses() []NodeStatus {
	c.mu.Lock()
	nodes := make([]*node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()
	out := make([]NodeStatus, 0, len(nodes))
	for _, n := range nodes {
		n.mu.Lock()
		out = append(out, n.st)
		n.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.Addr, b.Addr) })
	return out
}

// probeLoop probes one node every Interval (jittered) until ctx ends,
// which Remove and Stop do; it is the node's only prober, so probes of one
// node never overlap.
func (c *Checker) probeLoop(ctx context.Context, n *node) {
	defer c.wg.Done()
	defer close(n.done)
	timer := time.NewTimer(firstWait(c.conf().Interval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if rest := n.coolDown(time.Now()); rest > 0 {
			timer.Reset(rest)
			continue
		}
		r := c.probe(ctx, n.addr)
		if ctx.Err() != nil {
			return
		}
		if o := c.observer(); o != nil && r.verdict != verdictSkip {
			o.ProbeDone(n.addr, r.ok, r.latency)
		}
		if len(r.malformed) > 0 {
			c.log.Debug("health: ignored malformed agent tokens", "node", n.addr, "tokens", r.malformed)
		}
		c.apply(n, r, time.Now())
		timer.Reset(jittered(c.conf().Interval))
	}
}

// coolDown returns how long an ejected node still rests, 0 if it does not.
func (n *node) coolDown(now time.Time) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st.State != StateEjected {
		return 0
	}
	return max(n.ejectedUntil.Sub(now), 0)
}

// apply records one probe result on n and moves its state machine.
func (c *Checker) apply(n *node, r result, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed {
		return
	}
	st := &n.st
	st.LastCheck, st.LastLatency, st.LastResult = now, r.latency, r.text
	if r.answered {
		if st.AgentWeight != r.agent.weight {
			st.AgentWeight = r.agent.weight
			n.t.SetAgentWeight(r.agent.weight)
		}
		st.AgentLoad = 0
		if r.agent.hasLoad {
			st.AgentLoad = r.agent.load
		}
	}
	if r.verdict == verdictSkip {
		// Nothing reached the node: its counts and state stay as they
		// were, and one line says so when the streak starts.
		if !n.skipping {
			c.log.Warn("health: probe not sent, the gateway is short of local resources; node state kept",
				"node", n.addr, "result", r.text)
		}
		n.skipping = true
		return
	}
	n.skipping = false
	if st.State == StateEjected && now.Before(n.ejectedUntil) {
		return // a probe that started before the ejection: the cool-down rules
	}
	switch r.verdict {
	case verdictPass:
		st.ConsecutivePasses++
		st.ConsecutiveFailures = 0
	case verdictFail:
		st.ConsecutiveFailures++
		st.ConsecutivePasses = 0
	case verdictDrain:
		st.ConsecutivePasses, st.ConsecutiveFailures = 0, 0
	}
	n.lastPass = r.verdict == verdictPass
	c.step(n, r, now)
	c.settleDrain(n, now)
}

// step applies the state rules to one probe verdict; see docs/health.md.
func (c *Checker) step(n *node, r result, now time.Time) {
	st := &n.st
	rose := st.ConsecutivePasses >= c.conf().Rise
	fell := st.ConsecutiveFailures >= c.conf().Fall
	switch s := st.State; {
	case r.verdict == verdictDrain:
		if s != StateDraining && s != StateDrained {
			c.transition(n, StateDraining, now, "drain signal", slog.String("result", r.text))
		}
	case s == StateUp:
		if fell {
			c.transition(n, StateDown, now, "probes failed", slog.String("result", r.text))
		}
	case s == StateDown || s == StateEjected:
		if rose {
			c.transition(n, StateUp, now, "probes passed")
		} else if fell && s == StateEjected {
			c.transition(n, StateDown, now, "probes failed", slog.String("result", r.text))
		}
	case st.AdminDrain:
		// Draining or drained by an admin: the probes only inform.
	case rose || (n.undrained && r.verdict == verdictPass):
		c.transition(n, StateUp, now, "probes passed")
	case fell:
		c.transition(n, StateDown, now, "probes failed", slog.String("result", r.text))
	}
}

// settleDrain moves a draining node with no live connection to drained,
// and a drained node that has one again back to draining.
func (c *Checker) settleDrain(n *node, now time.Time) {
	switch live := n.t.Live(); {
	case n.st.State == StateDraining && live <= 0:
		c.transition(n, StateDrained, now, "no live connection")
	case n.st.State == StateDrained && live > 0:
		c.transition(n, StateDraining, now, "live connections", slog.Int("live", live))
	}
}

// transition moves n to state to, telling the target and the observer
// once. The caller holds n.mu.
func (c *Checker) transition(n *node, to State, now time.Time, why string, attrs ...any) {
	from := n.st.State
	if from == to {
		return
	}
	n.st.State = to
	if to != StateDraining && to != StateDrained {
		n.undrained = false // the undrain shortcut only leaves a drain
	}
	if to == StateUp {
		n.st.PassiveFailures = 0
		if c.conf().SlowStart > 0 {
			n.t.SetSlowStart(now, c.conf().SlowStart)
		}
	}
	n.t.SetState(to)
	if o := c.observer(); o != nil {
		o.StateChanged(n.addr, from, to)
	}
	level := slog.LevelInfo
	if to == StateDown || to == StateEjected {
		level = slog.LevelWarn
	}
	args := append([]any{"node", n.addr, "from", from.String(), "to", to.String(), "why", why}, attrs...)
	c.log.Log(context.Background(), level, "health: node state changed", args...)
}

// jittered returns d moved by a uniformly random amount within ±10%, so
// the probes of many nodes drift apart instead of firing together.
func jittered(d time.Duration) time.Duration {
	j := int64(d / 10)
	if j <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(2*j+1)-j)
}

// firstWait returns a uniformly random wait in [0, d) before a node's first
// probe, so the nodes of a pool added together are probed at spread
// instants.
func firstWait(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}
