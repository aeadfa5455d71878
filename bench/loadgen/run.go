package loadgen

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Run runs the scenario c describes and returns its finalized report
// (thresholds not yet applied). ctx cancels the run early; the report then
// covers what happened so far. It closes the connections of
// c.Dialer.H2 at its end.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	rec := NewRecorder(c.Scenario)
	start := time.Now()
	var err error
	switch c.Scenario {
	case "idle":
		err = runIdle(ctx, &c, rec)
	case "churn":
		err = runChurn(ctx, &c, rec)
	case "fanout":
		err = runFanout(ctx, &c, rec)
	case "reconnect-storm":
		err = runStorm(ctx, &c, rec)
	case "kill", "drain":
		err = runChaos(ctx, &c, rec)
	}
	if c.Dialer.H2 != nil {
		c.Dialer.H2.Close()
	}
	r := rec.Report()
	r.URL = c.URL
	if t, terr := ParseTarget(strings.ReplaceAll(c.URL, "%d", "0")); terr == nil {
		r.Transport = c.Dialer.Transport(t)
	}
	r.ElapsedMS = ms(time.Since(start))
	r.Finalize()
	return r, err
}

// rssBytes returns this process's resident set size after returning freed
// memory to the OS, or 0 when /proc is unreadable.
func rssBytes() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// pool tracks the open connections of a scenario so they can be pinged and
// closed together. It is safe for concurrent use.
type pool struct {
	mu    sync.Mutex
	conns map[*Conn]struct{}
	wg    sync.WaitGroup // one per ReadLoop
}

func newPool() *pool { return &pool{conns: map[*Conn]struct{}{}} }

func (p *pool) add(c *Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *pool) remove(c *Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *pool) snapshot() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

// closeAll starts the close handshake on every connection and waits up to
// wait (plus a second) for the read loops to end; stragglers are aborted.
func (p *pool) closeAll(wait time.Duration) {
	for _, c := range p.snapshot() {
		c.Close(1000, wait)
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	t := time.NewTimer(wait + time.Second)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	for _, c := range p.snapshot() {
		c.Abort()
	}
	<-done
}

// ramp calls f(i) for i in [0, n) on its own goroutine, paced at rate per
// second, and waits until every f returned. It stops launching when ctx
// ends.
func ramp(ctx context.Context, n int, rate float64, f func(i int)) {
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if !sleepCtx(ctx, time.Until(start.Add(time.Duration(float64(i)/rate*float64(time.Second))))) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// dialOne dials t and records the result; it returns nil on failure.
func dialOne(ctx context.Context, c *Config, rec *Recorder, t Target) *Conn {
	t0 := time.Now()
	conn, err := c.Dialer.Dial(ctx, t)
	if err != nil {
		if !ended(ctx) { // else not a failure: the run (or the storm's give-up) ended
			rec.Fail(Reason(err))
			if n := rec.logged.Add(1); n <= 5 {
				progress(c, "connect failed: %v", err)
			}
		}
		return nil
	}
	rec.Connected(time.Since(t0), conn)
	return conn
}

// countDrop records a connection that ended before the client closed it.
func countDrop(rec *Recorder, code uint16) {
	rec.Update(func(r *Report) { r.DroppedBy[strconv.Itoa(int(code))]++ })
}

func progress(c *Config, format string, args ...any) {
	fmt.Fprintf(c.Log, "wsload[%d]: %s\n", c.Proc, fmt.Sprintf(format, args...))
}

// ended reports whether ctx is done or past its deadline. A dial whose
// deadline passed fails at once, possibly before ctx's own timer has
// fired, so loops check the deadline too.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
