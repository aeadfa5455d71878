package health

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor is how long a test waits for an observable event before failing;
// generous so a loaded CI machine does not flake.
const waitFor = 10 * time.Second

// fakeTarget is a Target that records what the checker tells it.
type fakeTarget struct {
	addr string
	live atomic.Int64

	mu          sync.Mutex
	states      []State
	agentWeight int
	agentSets   int
	slowSince   time.Time
	slowOver    time.Duration
}

func newTarget(addr string) *fakeTarget { return &fakeTarget{addr: addr} }

func (f *fakeTarget) Addr() string { return f.addr }
func (f *fakeTarget) Live() int    { return int(f.live.Load()) }
func (f *fakeTarget) SetState(s State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states = append(f.states, s)
}
func (f *fakeTarget) SetAgentWeight(w int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agentWeight = w
	f.agentSets++
}
func (f *fakeTarget) SetSlowStart(since time.Time, over time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slowSince, f.slowOver = since, over
}

func (f *fakeTarget) States() []State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]State(nil), f.states...)
}

func (f *fakeTarget) AgentWeight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agentWeight
}

func (f *fakeTarget) SlowStart() (time.Time, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slowSince, f.slowOver
}

// event is one Observer call: a probe (kind "probe") or a transition.
type event struct {
	kind     string // "probe" or "state"
	addr     string
	ok       bool
	from, to State
}

// recorder is an Observer that keeps every event in order.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) ProbeDone(addr string, ok bool, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{kind: "probe", addr: addr, ok: ok})
}

func (r *recorder) StateChanged(addr string, from, to State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{kind: "state", addr: addr, from: from, to: to})
}

func (r *recorder) Events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// transitions returns the "to" states of the recorded transitions.
func (r *recorder) transitions() []State {
	var out []State
	for _, e := range r.Events() {
		if e.kind == "state" {
			out = append(out, e.to)
		}
	}
	return out
}

// probesBefore returns the verdicts (ok) of the probes recorded since the
// previous transition up to the transition to state to (its first
// occurrence after skip transitions).
func (r *recorder) probesBefore(to State, skip int) []bool {
	var run []bool
	for _, e := range r.Events() {
		if e.kind == "probe" {
			run = append(run, e.ok)
			continue
		}
		if e.to == to {
			if skip == 0 {
				return run
			}
			skip--
		}
		run = nil
	}
	return nil
}

// backend is a real loopback HTTP server whose answer a test can change.
type backend struct {
	srv   *httptest.Server
	code  atomic.Int32
	body  atomic.Value // string
	agent atomic.Value // string; "" sends no header
	sleep atomic.Int64 // time.Duration to stall before answering
	hits  atomic.Int64

	mu    sync.Mutex
	hosts []string
	paths []string
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	b := &backend{}
	b.code.Store(200)
	b.body.Store("ok")
	b.agent.Store("")
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	b.hits.Add(1)
	b.mu.Lock()
	b.hosts = append(b.hosts, r.Host)
	b.paths = append(b.paths, r.URL.Path)
	b.mu.Unlock()
	if d := time.Duration(b.sleep.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.Context().Done(): // the prober gave up and closed
		case <-t.C:
		}
	}
	if a := b.agent.Load().(string); a != "" {
		w.Header().Set(AgentHeader, a)
	}
	w.WriteHeader(int(b.code.Load()))
	_, _ = w.Write([]byte(b.body.Load().(string)))
}

func (b *backend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

func (b *backend) set(code int, body, agent string) {
	b.body.Store(body)
	b.agent.Store(agent)
	b.code.Store(int32(code))
}

// fastConfig is a config with short timings for tests.
func fastConfig() Config {
	return Config{Interval: 10 * time.Millisecond, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}
}

// startChecker returns a checker with a recorder, stopped at cleanup.
func startChecker(t *testing.T, cfg Config) (*Checker, *recorder) {
	t.Helper()
	c := NewChecker(cfg, nil)
	rec := &recorder{}
	c.SetObserver(rec)
	t.Cleanup(c.Stop)
	return c, rec
}

// waitUntil polls cond every few milliseconds until it holds, failing the
// test after waitFor.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitState waits until addr is in state want.
func waitState(t *testing.T, c *Checker, addr string, want State) NodeStatus {
	t.Helper()
	var st NodeStatus
	waitUntil(t, addr+" "+want.String(), func() bool {
		var ok bool
		st, ok = c.Status(addr)
		return ok && st.State == want
	})
	return st
}

// waitProbes waits until at least k more probes of addr have been recorded
// than when it was called.
func waitProbes(t *testing.T, rec *recorder, addr string, k int) {
	t.Helper()
	count := func() int {
		n := 0
		for _, e := range rec.Events() {
			if e.kind == "probe" && e.addr == addr {
				n++
			}
		}
		return n
	}
	start := count()
	waitUntil(t, "probes", func() bool { return count() >= start+k })
}

// sameStates reports whether the target heard exactly the transitions the
// observer saw, one SetState per StateChanged.
func sameStates(t *testing.T, f *fakeTarget, rec *recorder) {
	t.Helper()
	got, want := f.States(), rec.transitions()
	if len(got) == 0 || got[0] != StateUp {
		t.Fatalf("target heard %v, want up first (from Add)", got)
	}
	got = got[1:]
	if len(got) != len(want) {
		t.Fatalf("target heard %v, observer saw %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("target heard %v, observer saw %v", got, want)
		}
	}
}
