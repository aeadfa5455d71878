package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Scenarios lists the scenario names Run accepts.
var Scenarios = []string{"idle", "churn", "fanout", "reconnect-storm", "kill", "drain"}

// ErrBadConfig is returned by Config.Validate for a scenario that cannot
// run as configured (unknown scenario, missing %d, non-positive count).
var ErrBadConfig = errors.New("loadgen: bad configuration")

// Config is one scenario run. Durations are wall time; counts are per
// process (the -procs parent splits them with Split). It is a plain value,
// read-only once Run starts.
type Config struct {
	// Scenario is one of Scenarios.
	Scenario string
	// URL is the ws:// or wss:// target; "%d" in it is replaced by a
	// room number.
	URL string
	// Dialer opens the connections (sources, handshake timeout).
	Dialer Dialer
	// Seed seeds the jitter and the run id (default 0: random).
	Seed uint64
	// Proc is this process's index among Procs (default 0 of 1); sender ids
	// and room numbers are kept apart by it.
	Proc, Procs int
	// RoomBase is the first room number of this process (default 0).
	RoomBase int
	// Rooms is how many rooms %d cycles over (idle, reconnect-storm,
	// default 100) or how many rooms fanout/kill/drain fill (default 10).
	Rooms int

	// N is the connection count (idle, reconnect-storm; default 1000).
	N int
	// Rate is how many connections are opened per second while ramping
	// (default 1000 per second).
	Rate float64
	// Hold is how long idle holds the connections once ramped (default
	// 10s).
	Hold time.Duration
	// Ping sends a ping on every idle connection at this interval (default
	// 0: none).
	Ping time.Duration

	// Concurrency is churn's worker count (default 10).
	Concurrency int
	// Duration is how long churn loops, or fanout senders send (default
	// 10s).
	Duration time.Duration

	// Members is fanout's room size (default 2).
	Members int
	// MsgRate is messages per second per member (default 1).
	MsgRate float64
	// Size is the message size in bytes (default and minimum 32).
	Size int
	// Settle bounds the wait for messages in flight after the senders stop
	// (default 2s; kill and drain 10s), and how long a frozen member's
	// socket is read once the run ended.
	Settle time.Duration
	// Frozen is how many fanout members connect and then neither read
	// their socket nor send until the run ends, holding it open (default
	// 0): a client that stopped reading. They are the last members of
	// the rooms, spread over the rooms as evenly as possible (see
	// frozenIn); the delivery and latency figures count the others only,
	// and Report.Frozen and the fields after it describe them.
	Frozen int

	// After is when the storm's drop, the kill or the drain happens,
	// counted from the end of the ramp (default 1s).
	After time.Duration
	// Window spreads reconnects (storm, kill, drain): each client waits a
	// uniform random delay in [0, Window) before its first try (default
	// 1s).
	Window time.Duration
	// GiveUp is how long a client keeps trying to come back (default 30s).
	GiveUp time.Duration

	// KillCmd is run with sh -c at After (kill, drain).
	KillCmd string
	// KillPID, with Signal (default KILL for kill, TERM for drain), is
	// signalled at After instead of KillCmd.
	KillPID int
	Signal  string
	// RestartCmd is started with sh -c at RestartAfter (counted like
	// After) and left running.
	RestartCmd   string
	RestartAfter time.Duration
	// DrainURL is POSTed at After (drain), e.g. the gateway's admin drain.
	DrainURL string

	// Log receives progress lines (default io.Discard).
	Log io.Writer
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	if c.Procs <= 0 {
		c.Procs = 1
	}
	switch c.Scenario {
	case "idle", "reconnect-storm":
		def(&c.Rooms, 100)
	default:
		def(&c.Rooms, 10)
	}
	def(&c.N, 1000)
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	defD(&c.Hold, 10*time.Second)
	def(&c.Concurrency, 10)
	defD(&c.Duration, 10*time.Second)
	def(&c.Members, 2)
	if c.MsgRate <= 0 {
		c.MsgRate = 1
	}
	c.Size = max(c.Size, MsgHeaderLen)
	if c.Scenario == "kill" || c.Scenario == "drain" {
		defD(&c.Settle, 10*time.Second)
	}
	defD(&c.Settle, 2*time.Second)
	defD(&c.After, time.Second)
	defD(&c.Window, time.Second)
	defD(&c.GiveUp, 30*time.Second)
	if c.Signal == "" {
		c.Signal = "KILL"
		if c.Scenario == "drain" {
			c.Signal = "TERM"
		}
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Validate checks c after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	known := false
	for _, s := range Scenarios {
		known = known || s == c.Scenario
	}
	if !known {
		return fmt.Errorf("%w: unknown scenario %q (want one of %s)", ErrBadConfig, c.Scenario, strings.Join(Scenarios, ", "))
	}
	if _, err := ParseTarget(strings.ReplaceAll(c.URL, "%d", "0")); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if strings.Count(c.URL, "%d") > 1 {
		return fmt.Errorf("%w: -url may hold %%d once", ErrBadConfig)
	}
	hasRoom := strings.Contains(c.URL, "%d")
	switch c.Scenario {
	case "churn":
		if !hasRoom && c.Concurrency*c.Procs > 1 {
			return fmt.Errorf("%w: churn with more than one worker needs %%d in -url (a room per worker)", ErrBadConfig)
		}
	case "fanout", "kill", "drain":
		if !hasRoom && c.Rooms*c.Procs > 1 {
			return fmt.Errorf("%w: %s with more than one room needs %%d in -url", ErrBadConfig, c.Scenario)
		}
		if c.Members < 2 {
			return fmt.Errorf("%w: -members must be at least 2", ErrBadConfig)
		}
	}
	if c.Frozen != 0 && c.Scenario != "fanout" {
		return fmt.Errorf("%w: -frozen goes with fanout only", ErrBadConfig)
	}
	// Every room keeps a member that reads: a room of frozen members only
	// measures nothing.
	if c.Frozen < 0 || frozenIn(c.Frozen, c.Rooms, 0) > c.Members-1 {
		return fmt.Errorf("%w: -frozen must be 0 to %d (all but one member of each room), got %d", ErrBadConfig, c.Rooms*(c.Members-1), c.Frozen)
	}
	if c.Scenario == "kill" || c.Scenario == "drain" {
		// Only the first of -procs children acts (Split clears the rest).
		if c.Proc == 0 && c.KillCmd == "" && c.KillPID == 0 && c.DrainURL == "" {
			return fmt.Errorf("%w: %s needs -kill-cmd, -kill-pid or -drain-url", ErrBadConfig, c.Scenario)
		}
		if _, err := parseSignal(c.Signal); err != nil {
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	return nil
}

// roomURL returns the target for room number n.
func (c *Config) roomTarget(n int) Target {
	t, _ := ParseTarget(strings.ReplaceAll(c.URL, "%d", strconv.Itoa(c.RoomBase+n)))
	return t
}

// Split returns the configuration of child i of procs: connection counts,
// workers and rooms divided as evenly as possible, room numbers and
// sender ids kept apart. Run-wide actions (the kill, the drain request)
// stay with child 0.
func (c Config) Split(i, procs int) Config {
	c = c.withDefaults()
	share := func(total int) int { return total/procs + btoi(i < total%procs) }
	first := func(total int) int { return i*(total/procs) + min(i, total%procs) }
	c.Proc, c.Procs = i, procs
	c.N = share(c.N)
	c.Rate /= float64(procs)
	workers := c.Concurrency
	c.Concurrency = share(workers)
	switch c.Scenario {
	case "fanout", "kill", "drain":
		frozen, rooms := 0, c.Rooms
		c.RoomBase += first(rooms)
		c.Rooms = share(rooms)
		for r := range c.Rooms {
			frozen += frozenIn(c.Frozen, rooms, first(rooms)+r)
		}
		c.Frozen = frozen
	case "churn":
		c.RoomBase += first(workers)
	default:
		// idle and storm cycle over the same rooms in every process.
	}
	c.Seed += uint64(i)
	if i != 0 {
		c.KillCmd, c.KillPID, c.RestartCmd, c.DrainURL = "", 0, "", ""
	}
	return c
}

// frozenIn returns how many of frozen members are in room r of rooms:
// frozen/rooms each, one more in the first frozen%rooms rooms. A process
// of -procs, given a run of consecutive rooms and their sum (Split), gets
// the same count in each of its rooms from its own share.
func frozenIn(frozen, rooms, r int) int {
	if rooms <= 0 {
		return 0
	}
	return frozen/rooms + btoi(r < frozen%rooms)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sleepCtx waits d or until ctx ends; it reports whether the full wait
// happened.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
