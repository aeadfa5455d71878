package health

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestStateString(t *testing.T) {
	tests := []struct {
		s    State
		want string
	}{
		{StateUp, "up"}, {StateDown, "down"}, {StateDraining, "draining"},
		{StateDrained, "drained"}, {StateEjected, "ejected"}, {State(9), "State(9)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.s.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero", Config{}, Config{Path: "/healthz", Interval: 2 * time.Second, Timeout: time.Second,
			Rise: 2, Fall: 3, EjectAfter: 3, EjectFor: 10 * time.Second}},
		{"eject after follows fall", Config{Fall: 5}, Config{Path: "/healthz", Interval: 2 * time.Second,
			Timeout: time.Second, Rise: 2, Fall: 5, EjectAfter: 5, EjectFor: 10 * time.Second}},
		{"set values kept", Config{Path: "/up", Host: "relay.internal", Interval: time.Second, Timeout: 100 * time.Millisecond,
			Rise: 1, Fall: 1, SlowStart: time.Minute, EjectAfter: 7, EjectFor: time.Second},
			Config{Path: "/up", Host: "relay.internal", Interval: time.Second, Timeout: 100 * time.Millisecond,
				Rise: 1, Fall: 1, SlowStart: time.Minute, EjectAfter: 7, EjectFor: time.Second}},
		{"bad path and host replaced", Config{Path: "/a b", Host: "x\r\nEvil: 1", SlowStart: -time.Second},
			Config{Path: "/healthz", Interval: 2 * time.Second, Timeout: time.Second,
				Rise: 2, Fall: 3, EjectAfter: 3, EjectFor: 10 * time.Second}},
		{"relative path replaced", Config{Path: "healthz"}, Config{Path: "/healthz", Interval: 2 * time.Second,
			Timeout: time.Second, Rise: 2, Fall: 3, EjectAfter: 3, EjectFor: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.withDefaults(); got != tt.want {
				t.Fatalf("withDefaults() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestFallRise flips a real server between 200 and 500: the node goes down
// after exactly Fall failed probes and comes back up, with slow start,
// after exactly Rise passing ones.
func TestFallRise(t *testing.T) {
	b := newBackend(t)
	cfg := fastConfig()
	cfg.SlowStart = time.Minute
	c, rec := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.Add(f)

	waitProbes(t, rec, f.addr, cfg.Rise+1)
	if st, _ := c.Status(f.addr); st.State != StateUp || st.LastResult != "ok" {
		t.Fatalf("healthy node: %+v", st)
	}
	b.set(500, "boom", "")
	st := waitState(t, c, f.addr, StateDown)
	if st.ConsecutiveFailures < cfg.Fall || st.LastResult != "http 500" {
		t.Fatalf("down node: %+v", st)
	}
	if run := rec.probesBefore(StateDown, 0); !slices.Equal(tail(run, cfg.Fall+1), append([]bool{true}, falses(cfg.Fall)...)) {
		t.Fatalf("probes before down %v, want a pass then exactly %d failures", run, cfg.Fall)
	}
	before := time.Now()
	b.set(200, "ok", "")
	waitState(t, c, f.addr, StateUp)
	if run := rec.probesBefore(StateUp, 0); !slices.Equal(run, trues(cfg.Rise)) {
		t.Fatalf("probes between down and up %v, want exactly %d passes", run, cfg.Rise)
	}
	since, over := f.SlowStart()
	if over != time.Minute || since.Before(before) {
		t.Fatalf("slow start (%v, %v), want a ramp of 1m from after the flip", since, over)
	}
	if got := rec.transitions(); !slices.Equal(got, []State{StateDown, StateUp}) {
		t.Fatalf("transitions %v, want [down up]", got)
	}
	sameStates(t, f, rec)
}

func tail(s []bool, k int) []bool { return s[max(len(s)-k, 0):] }
func falses(k int) []bool         { return make([]bool, k) }
func trues(k int) []bool {
	s := make([]bool, k)
	for i := range s {
		s[i] = true
	}
	return s
}

// TestProbeFailures covers failures without a usable answer and failing
// statuses: each takes an up node down with the right LastResult.
func TestProbeFailures(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T) string // returns the node address
		result string
	}{
		{"timeout", func(t *testing.T) string {
			b := newBackend(t)
			b.sleep.Store(int64(5 * time.Second)) // beyond Timeout; ends early when the prober closes
			return b.addr()
		}, "timeout"},
		{"refused", func(t *testing.T) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			return addr
		}, "refused"},
		{"closed without an answer", func(t *testing.T) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { // reads each request and hangs up, until the test ends
				defer close(done)
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					_ = conn.SetDeadline(time.Now().Add(waitFor))
					// Reading the request first makes the close a FIN, not
					// a reset for unread data.
					_, _ = http.ReadRequest(bufio.NewReader(conn))
					conn.Close()
				}
			}()
			t.Cleanup(func() { ln.Close(); <-done })
			return ln.Addr().String()
		}, "closed without an answer"},
		{"503 not draining", func(t *testing.T) string {
			b := newBackend(t)
			b.set(503, "overloaded", "")
			return b.addr()
		}, "http 503"},
		{"redirect", func(t *testing.T) string {
			b := newBackend(t)
			b.set(302, "", "")
			return b.addr()
		}, "http 302"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.Timeout = 30 * time.Millisecond
			cfg.Fall = 2
			c, rec := startChecker(t, cfg)
			f := newTarget(tt.setup(t))
			c.Add(f)
			st := waitState(t, c, f.addr, StateDown)
			if st.LastResult != tt.result || st.ConsecutiveFailures < 2 {
				t.Fatalf("status %+v, want down after %q", st, tt.result)
			}
			sameStates(t, f, rec)
		})
	}
}

// TestDrainSignal checks a 503 "draining" answer and an agent "drain"
// token each mark the node draining on the first such probe, with no Fall
// wait; drained follows when Live reaches 0, and a healthy answer brings
// the node up after Rise.
func TestDrainSignal(t *testing.T) {
	tests := []struct {
		name        string
		code        int
		body, agent string
		wantResult  string
		wantProbeOK bool
	}{
		{"503 draining", 503, "draining", "", "http 503 draining", false},
		{"503 draining with newline", 503, "draining\n", "", "http 503 draining", false},
		{"agent drain on 200", 200, "ok", "drain", "http 200 agent drain", true},
		{"agent drain on 500", 500, "ok", "up, DRAIN, load=3", "http 500 agent drain", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t)
			cfg := fastConfig()
			cfg.Fall = 50 // a drain must not wait for failures
			c, rec := startChecker(t, cfg)
			f := newTarget(b.addr())
			f.live.Store(2)
			c.Add(f)
			waitProbes(t, rec, f.addr, 1)
			b.set(tt.code, tt.body, tt.agent)
			st := waitState(t, c, f.addr, StateDraining)
			if st.LastResult != tt.wantResult {
				t.Fatalf("LastResult %q, want %q", st.LastResult, tt.wantResult)
			}
			if run := rec.probesBefore(StateDraining, 0); len(run) == 0 || run[len(run)-1] != tt.wantProbeOK {
				t.Fatalf("probes before draining %v, want the last ok=%v", run, tt.wantProbeOK)
			}
			waitProbes(t, rec, f.addr, 2)
			if st, _ := c.Status(f.addr); st.State != StateDraining {
				t.Fatalf("with 2 live connections the node is %v, want draining", st.State)
			}
			f.live.Store(0)
			waitState(t, c, f.addr, StateDrained)
			b.set(200, "ok", "")
			waitState(t, c, f.addr, StateUp)
			// Probes that still carried the drain signal may precede the
			// passes; with a 503 they are failures, so the run of passes
			// is exact.
			run := rec.probesBefore(StateUp, 0)
			passes := 0
			for i := len(run) - 1; i >= 0 && run[i]; i-- {
				passes++
			}
			if passes < cfg.Rise || (!tt.wantProbeOK && passes != cfg.Rise) {
				t.Fatalf("probes between drained and up %v, want %d passes to end it", run, cfg.Rise)
			}
			if got := rec.transitions(); !slices.Equal(got, []State{StateDraining, StateDrained, StateUp}) {
				t.Fatalf("transitions %v", got)
			}
			sameStates(t, f, rec)
		})
	}
}

// TestDrainedFallsDown checks a node drained by its own signal that then
// stops answering goes down after Fall failures.
func TestDrainedFallsDown(t *testing.T) {
	b := newBackend(t)
	c, rec := startChecker(t, fastConfig())
	f := newTarget(b.addr())
	c.Add(f)
	b.set(503, "draining", "")
	waitState(t, c, f.addr, StateDrained)
	b.set(500, "gone", "")
	waitState(t, c, f.addr, StateDown)
	if got := rec.transitions(); !slices.Equal(got, []State{StateDraining, StateDrained, StateDown}) {
		t.Fatalf("transitions %v", got)
	}
	sameStates(t, f, rec)
}

// TestAgentHints drives the agent header through a weight, a reset, a load
// and a malformed weight.
func TestAgentHints(t *testing.T) {
	b := newBackend(t)
	c, rec := startChecker(t, fastConfig())
	f := newTarget(b.addr())
	c.Add(f)
	steps := []struct {
		name       string
		agent      string
		wantWeight int
		wantLoad   int
	}{
		{"weight and load", "up, weight=7, load=12", 7, 12},
		{"no weight resets", "up", 0, 0},
		{"weight again, unknown token ignored", "weight=250,maint-window=3", 250, 0},
		{"no header resets", "", 0, 0},
		{"weight again", "Weight=40", 40, 0},
		{"malformed weight resets", "weight=abc, load=5", 0, 5},
		{"weight out of range resets", "weight=1001", 0, 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			b.set(200, "ok", s.agent)
			waitUntil(t, "agent weight "+s.agent, func() bool {
				st, _ := c.Status(f.addr)
				return st.AgentWeight == s.wantWeight && st.AgentLoad == s.wantLoad && f.AgentWeight() == s.wantWeight
			})
			// Two more probes with the same answer change nothing.
			waitProbes(t, rec, f.addr, 2)
			if st, _ := c.Status(f.addr); st.AgentWeight != s.wantWeight || st.State != StateUp {
				t.Fatalf("status %+v", st)
			}
		})
	}
	f.mu.Lock()
	sets := f.agentSets
	f.mu.Unlock()
	if sets != 6 {
		t.Errorf("SetAgentWeight called %d times, want once per change (6)", sets)
	}
	if len(rec.transitions()) != 0 {
		t.Errorf("agent weights changed the state: %v", rec.transitions())
	}
}

// TestPassiveEjection reports passive failures: fewer than EjectAfter, or
// interrupted by a success, do nothing; EjectAfter in a row eject at once;
// no probe runs during the cool-down; after EjectFor, Rise passing probes
// bring the node up with slow start and a clean passive count.
func TestPassiveEjection(t *testing.T) {
	b := newBackend(t)
	cfg := fastConfig()
	cfg.EjectAfter = 3
	cfg.EjectFor = 150 * time.Millisecond
	cfg.SlowStart = time.Second
	c, rec := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.Add(f)
	dialErr := errors.New("dial tcp: connection refused")

	c.ReportFailure(f.addr, dialErr)
	c.ReportFailure(f.addr, dialErr)
	c.ReportSuccess(f.addr)
	c.ReportFailure(f.addr, dialErr)
	c.ReportFailure(f.addr, dialErr)
	if st, _ := c.Status(f.addr); st.State != StateUp || st.PassiveFailures != 2 {
		t.Fatalf("after a success and 2 failures: %+v", st)
	}
	c.ReportFailure(f.addr, dialErr)
	ejectedAt := time.Now()
	st, _ := c.Status(f.addr)
	if st.State != StateEjected || st.PassiveFailures != 3 {
		t.Fatalf("after 3 failures in a row: %+v", st)
	}
	hitsAtEject := b.hits.Load()
	c.ReportFailure(f.addr, dialErr) // more failures while ejected change nothing
	st = waitState(t, c, f.addr, StateUp)
	if time.Since(ejectedAt) < cfg.EjectFor {
		t.Fatalf("node came back before the cool-down of %v", cfg.EjectFor)
	}
	if st.PassiveFailures != 0 {
		t.Fatalf("passive failures %d after coming up, want 0", st.PassiveFailures)
	}
	if run := rec.probesBefore(StateUp, 0); len(run) > cfg.Rise+1 || !slices.Equal(tail(run, cfg.Rise), trues(cfg.Rise)) {
		// At most one probe started before the ejection may land (ignored).
		t.Fatalf("probes between ejected and up %v, want %d passes", run, cfg.Rise)
	}
	if hits := b.hits.Load() - hitsAtEject; hits > int64(cfg.Rise)+2 {
		t.Fatalf("%d probes hit the node from ejection to up, want at most rise+2 (no probing during the cool-down)", hits)
	}
	if _, over := f.SlowStart(); over != time.Second {
		t.Fatalf("slow start over %v after ejection, want 1s", over)
	}
	if got := rec.transitions(); !slices.Equal(got, []State{StateEjected, StateUp}) {
		t.Fatalf("transitions %v", got)
	}
	sameStates(t, f, rec)
}

// TestEjectedStaysOutWhileFailing checks an ejected node whose probes fail
// after the cool-down goes down rather than up, and that a passive
// failure on a down node does not eject it.
func TestEjectedStaysOutWhileFailing(t *testing.T) {
	b := newBackend(t)
	b.set(500, "no", "")
	cfg := fastConfig()
	cfg.Fall = 50 // the probes alone would take long to bring it down
	cfg.EjectAfter = 1
	cfg.EjectFor = 50 * time.Millisecond
	c, rec := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.Add(f)
	c.ReportFailure(f.addr, errors.New("handshake: 502"))
	waitState(t, c, f.addr, StateDown)
	c.ReportFailure(f.addr, errors.New("handshake: 502"))
	if st, _ := c.Status(f.addr); st.State != StateDown {
		t.Fatalf("passive failure on a down node moved it to %v", st.State)
	}
	if got := rec.transitions(); !slices.Equal(got, []State{StateEjected, StateDown}) {
		t.Fatalf("transitions %v", got)
	}
	sameStates(t, f, rec)
}

func TestAdminDrain(t *testing.T) {
	t.Run("drain holds against passing probes, undrain is immediate", func(t *testing.T) {
		b := newBackend(t)
		c, rec := startChecker(t, fastConfig())
		f := newTarget(b.addr())
		f.live.Store(1)
		c.Add(f)
		waitProbes(t, rec, f.addr, 1)
		if err := c.Drain(f.addr); err != nil {
			t.Fatal(err)
		}
		if st, _ := c.Status(f.addr); st.State != StateDraining || !st.AdminDrain {
			t.Fatalf("after Drain: %+v", st)
		}
		waitProbes(t, rec, f.addr, 3)
		if st, _ := c.Status(f.addr); st.State != StateDraining || st.ConsecutivePasses < 3 {
			t.Fatalf("passing probes under admin drain: %+v", st)
		}
		f.live.Store(0)
		waitState(t, c, f.addr, StateDrained)
		if err := c.Undrain(f.addr); err != nil {
			t.Fatal(err)
		}
		if st, _ := c.Status(f.addr); st.State != StateUp || st.AdminDrain {
			t.Fatalf("Undrain after a passing probe: %+v, want up at once", st)
		}
		if got := rec.transitions(); !slices.Equal(got, []State{StateDraining, StateDrained, StateUp}) {
			t.Fatalf("transitions %v", got)
		}
		sameStates(t, f, rec)
	})
	t.Run("drain with no live connection is drained at once", func(t *testing.T) {
		b := newBackend(t)
		c, rec := startChecker(t, fastConfig())
		f := newTarget(b.addr())
		c.Add(f)
		if err := c.Drain(f.addr); err != nil {
			t.Fatal(err)
		}
		if err := c.Drain(f.addr); err != nil { // twice is harmless
			t.Fatal(err)
		}
		if st, _ := c.Status(f.addr); st.State != StateDrained {
			t.Fatalf("after Drain with Live 0: %v", st.State)
		}
		if got := rec.transitions(); !slices.Equal(got, []State{StateDraining, StateDrained}) {
			t.Fatalf("transitions %v", got)
		}
		sameStates(t, f, rec)
	})
	t.Run("undrain after failing probes waits for the next pass", func(t *testing.T) {
		b := newBackend(t)
		b.set(500, "no", "")
		cfg := fastConfig()
		cfg.Rise = 3
		cfg.Fall = 1000 // keep it drained, not down, while the probes fail
		c, rec := startChecker(t, cfg)
		f := newTarget(b.addr())
		c.Add(f)
		if err := c.Drain(f.addr); err != nil {
			t.Fatal(err)
		}
		waitProbes(t, rec, f.addr, 2)
		if err := c.Undrain(f.addr); err != nil {
			t.Fatal(err)
		}
		waitProbes(t, rec, f.addr, 2)
		if st, _ := c.Status(f.addr); st.State != StateDrained || st.AdminDrain {
			t.Fatalf("undrained while failing: %+v, want drained until a pass", st)
		}
		b.set(200, "ok", "")
		waitState(t, c, f.addr, StateUp)
		if run := rec.probesBefore(StateUp, 0); len(run) == 0 || !slices.Equal(tail(run, 2), []bool{false, true}) {
			t.Fatalf("probes before up %v, want up on the first pass (rise is 3)", run)
		}
		sameStates(t, f, rec)
	})
	t.Run("admin drain wins over a down node", func(t *testing.T) {
		b := newBackend(t)
		b.set(500, "no", "")
		cfg := fastConfig()
		cfg.Fall = 1
		c, rec := startChecker(t, cfg)
		f := newTarget(b.addr())
		c.Add(f)
		waitState(t, c, f.addr, StateDown)
		if err := c.Drain(f.addr); err != nil {
			t.Fatal(err)
		}
		b.set(200, "ok", "")
		waitProbes(t, rec, f.addr, 4)
		if st, _ := c.Status(f.addr); st.State != StateDrained {
			t.Fatalf("passing probes under admin drain: %v, want drained", st.State)
		}
		if err := c.Undrain(f.addr); err != nil {
			t.Fatal(err)
		}
		waitState(t, c, f.addr, StateUp)
		sameStates(t, f, rec)
	})
	t.Run("unknown node", func(t *testing.T) {
		c, _ := startChecker(t, fastConfig())
		for name, fn := range map[string]func(string) error{"Drain": c.Drain, "Undrain": c.Undrain} {
			if err := fn("127.0.0.1:1"); !errors.Is(err, ErrUnknownNode) {
				t.Fatalf("%s of an unknown node: %v, want ErrUnknownNode", name, err)
			}
		}
		if _, ok := c.Status("127.0.0.1:1"); ok {
			t.Fatal("status of an unknown node")
		}
		c.ReportFailure("127.0.0.1:1", errors.New("x")) // ignored
		c.ReportSuccess("127.0.0.1:1")
	})
}

// TestProbeRequest checks what a probe sends: the path and the Host
// header, the node address by default.
func TestProbeRequest(t *testing.T) {
	tests := []struct {
		name, path, host string
		wantPath         string
		wantHost         func(addr string) string
	}{
		{"defaults", "", "", "/healthz", func(a string) string { return a }},
		{"configured", "/health/live", "relay.internal", "/health/live", func(string) string { return "relay.internal" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t)
			cfg := fastConfig()
			cfg.Path, cfg.Host = tt.path, tt.host
			c, rec := startChecker(t, cfg)
			c.Add(newTarget(b.addr()))
			waitProbes(t, rec, b.addr(), 1)
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.paths[0] != tt.wantPath || b.hosts[0] != tt.wantHost(b.addr()) {
				t.Fatalf("probe sent path %q host %q", b.paths[0], b.hosts[0])
			}
		})
	}
}

func TestStatusesSortedAndRemove(t *testing.T) {
	b1, b2, b3 := newBackend(t), newBackend(t), newBackend(t)
	c, rec := startChecker(t, fastConfig())
	targets := []*fakeTarget{newTarget(b3.addr()), newTarget(b1.addr()), newTarget(b2.addr())}
	for _, f := range targets {
		c.Add(f)
	}
	sts := c.Statuses()
	if len(sts) != 3 || !slices.IsSortedFunc(sts, func(a, b NodeStatus) int {
		if a.Addr < b.Addr {
			return -1
		}
		return 1
	}) {
		t.Fatalf("Statuses() = %+v, want 3 sorted by address", sts)
	}
	gone := targets[0]
	waitProbes(t, rec, gone.addr, 1)
	c.Remove(gone.addr)
	c.Remove(gone.addr) // twice is harmless
	hits := b3.hits.Load()
	if _, ok := c.Status(gone.addr); ok || len(c.Statuses()) != 2 {
		t.Fatal("removed node still has a status")
	}
	if err := c.Drain(gone.addr); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("Drain of a removed node: %v", err)
	}
	c.ReportFailure(gone.addr, errors.New("x"))
	waitProbes(t, rec, targets[1].addr, 3) // the others keep being probed
	if b3.hits.Load() != hits || !slices.Equal(gone.States(), []State{StateUp}) {
		t.Fatalf("removed node probed again (%d -> %d hits) or told %v", hits, b3.hits.Load(), gone.States())
	}
}

// TestAddReplacesTarget checks re-adding an address (a config reload) keeps
// its health and tells the new target the current state.
func TestAddReplacesTarget(t *testing.T) {
	b := newBackend(t)
	b.set(200, "ok", "weight=9")
	c, _ := startChecker(t, fastConfig())
	old := newTarget(b.addr())
	c.Add(old)
	waitUntil(t, "agent weight", func() bool { return old.AgentWeight() == 9 })
	if err := c.Drain(old.addr); err != nil {
		t.Fatal(err)
	}
	fresh := newTarget(b.addr())
	c.Add(fresh)
	if got := fresh.States(); !slices.Equal(got, []State{StateDrained}) || fresh.AgentWeight() != 9 {
		t.Fatalf("new target told %v weight %d, want [drained] and 9", got, fresh.AgentWeight())
	}
	if st, _ := c.Status(b.addr()); !st.AdminDrain {
		t.Fatal("re-adding lost the admin drain")
	}
}

func TestJitter(t *testing.T) {
	tests := []time.Duration{10 * time.Millisecond, 2 * time.Second, time.Minute}
	for _, d := range tests {
		t.Run(d.String(), func(t *testing.T) {
			lo, hi := d-d/10, d+d/10
			seen := map[time.Duration]bool{}
			for range 1000 {
				w := jittered(d)
				if w < lo || w > hi {
					t.Fatalf("jittered(%v) = %v, outside [%v, %v]", d, w, lo, hi)
				}
				seen[w] = true
				if f := firstWait(d); f < 0 || f >= d {
					t.Fatalf("firstWait(%v) = %v, outside [0, %v)", d, f, d)
				}
			}
			if len(seen) < 10 {
				t.Fatalf("1000 jittered waits took only %d values", len(seen))
			}
		})
	}
	if jittered(5) != 5 || firstWait(0) != 0 {
		t.Fatal("tiny durations must pass through")
	}
}

// TestStopLeavesNoGoroutine probes healthy, refused and stalling nodes,
// then stops: Stop cancels the stalled probe instead of waiting out its
// timeout, and the goroutine count returns to where it was.
func TestStopLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		good, stall := newBackend(t), newBackend(t)
		stall.sleep.Store(int64(time.Minute))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		refused := ln.Addr().String()
		ln.Close()

		cfg := fastConfig()
		cfg.Timeout = time.Minute
		c := NewChecker(cfg, nil)
		rec := &recorder{}
		c.SetObserver(rec)
		for _, a := range []string{good.addr(), stall.addr(), refused} {
			c.Add(newTarget(a))
		}
		waitProbes(t, rec, good.addr(), 2)
		waitProbes(t, rec, refused, 2)
		waitUntil(t, "a stalled probe", func() bool { return stall.hits.Load() > 0 })
		stopped := make(chan struct{})
		go func() { c.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(waitFor):
			t.Fatal("Stop did not cancel a probe stalled on a 1m timeout")
		}
		c.Stop() // twice is harmless
		c.Add(newTarget("127.0.0.1:1"))
		if len(c.Statuses()) != 3 {
			t.Fatal("Add after Stop added a node")
		}
		good.srv.Close()
		stall.srv.Close()
	}()
	waitUntil(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestAddPendingWaitsForRise pins the reload rule: a node added pending
// starts down and takes traffic only after Rise passing probes.
func TestAddPendingWaitsForRise(t *testing.T) {
	b := newBackend(t)
	cfg := fastConfig()
	c, rec := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.AddPending(f)
	if st, _ := c.Status(f.addr); st.State != StateDown {
		t.Fatalf("pending node starts %v, want down", st.State)
	}
	waitState(t, c, f.addr, StateUp)
	if run := rec.probesBefore(StateUp, 0); !slices.Equal(run, trues(cfg.Rise)) {
		t.Fatalf("probes before up %v, want exactly %d passes", run, cfg.Rise)
	}
	if got := f.States(); got[0] != StateDown {
		t.Fatalf("target told %v first, want down", got)
	}
}

// TestSetConfigKeepsState pins that new settings apply without resetting a
// node: a down node stays down under a new config, and the new Rise counts.
func TestSetConfigKeepsState(t *testing.T) {
	b := newBackend(t)
	cfg := fastConfig()
	c, rec := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.Add(f)
	b.set(500, "boom", "")
	waitState(t, c, f.addr, StateDown)
	cfg.Rise = cfg.Rise + 2
	c.SetConfig(cfg)
	if st, _ := c.Status(f.addr); st.State != StateDown {
		t.Fatalf("SetConfig moved a down node to %v", st.State)
	}
	b.set(200, "ok", "")
	waitState(t, c, f.addr, StateUp)
	if run := rec.probesBefore(StateUp, 0); !slices.Equal(run, trues(cfg.Rise)) {
		t.Fatalf("probes before up %v, want the new rise of %d", run, cfg.Rise)
	}
}

// refuseAll refuses every address, saying which.
type refuseAll struct{ asked atomic.Int64 }

func (r *refuseAll) CheckAddr(address string) error {
	r.asked.Add(1)
	return errors.New("refused by the test: " + address)
}

// TestRefuseStopsProbes pins Config.Refuse: a refused address is never
// connected to (the backend sees no request), its probes fail with the
// refusal as their result, and the node goes down; a SetConfig without
// Refuse lets the probes through again and the node comes back up.
func TestRefuseStopsProbes(t *testing.T) {
	b := newBackend(t)
	cfg := fastConfig()
	r := &refuseAll{}
	cfg.Refuse = r
	c, _ := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.Add(f)
	st := waitState(t, c, f.addr, StateDown)
	if !strings.Contains(st.LastResult, "refused by the test: "+b.addr()) {
		t.Fatalf("last result %q, want the refusal", st.LastResult)
	}
	if n := b.hits.Load(); n != 0 || r.asked.Load() < int64(cfg.Fall) {
		t.Fatalf("backend saw %d probes, the check was asked %d times", n, r.asked.Load())
	}
	cfg.Refuse = nil
	c.SetConfig(cfg)
	waitState(t, c, f.addr, StateUp)
	if b.hits.Load() == 0 {
		t.Fatal("up without a probe reaching the backend")
	}
}
