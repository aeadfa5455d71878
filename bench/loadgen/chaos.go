package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// signals are the names -signal accepts: a kill, the drains (TERM, INT),
// a reload (HUP), wsgate's upgrade onto a new binary (USR2), and a pause
// (STOP, CONT).
var signals = map[string]syscall.Signal{
	"KILL": syscall.SIGKILL, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT,
	"HUP": syscall.SIGHUP, "USR2": syscall.SIGUSR2, "QUIT": syscall.SIGQUIT,
	"STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT,
}

// parseSignal accepts "KILL", "SIGKILL", "kill" and the like.
func parseSignal(s string) (syscall.Signal, error) {
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
	if !ok {
		return 0, fmt.Errorf("unknown signal %q (want KILL, TERM, INT, HUP, USR2, QUIT, STOP or CONT)", s)
	}
	return sig, nil
}

// runChaos is kill and drain: a relay.v1 fanout during which, at c.After,
// a process is killed or signalled or a drain is requested, and optionally
// restarted at c.RestartAfter. Clients reconnect with ?since= and resend
// what was never acknowledged; the checker counts lost writes. BackAllMS
// is the time from the act (in a process that did not act, -procs, from
// the first drop it saw) until the last client was back.
func runChaos(ctx context.Context, c *Config, rec *Recorder) error {
	f := newFanout(c, rec, true)
	f.connectAll(ctx)
	progress(c, "connected; %s in %v", c.Scenario, c.After)
	errc := make(chan error, 2)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var acted atomic.Int64 // when act acted, Unix ns; 0 = it did not
	go func() { errc <- act(actx, c, &acted) }()
	go func() { errc <- restart(actx, c) }()
	f.sendFor(ctx, c.Duration)
	// Wait for everyone to be back (or to give up) before settling.
	deadline := time.Now().Add(c.GiveUp)
	for time.Now().Before(deadline) && ctx.Err() == nil && f.disconnected() > 0 {
		sleepCtx(ctx, 20*time.Millisecond)
	}
	f.settle(ctx)
	f.finish()
	f.backMu.Lock()
	from, last := f.firstDrop, f.lastBack
	f.backMu.Unlock()
	if at := acted.Load(); at != 0 {
		from = time.Unix(0, at)
	}
	if !from.IsZero() && last.After(from) {
		rec.Update(func(r *Report) { r.BackAllMS = ms(last.Sub(from)) })
	}
	cancel()
	var first error
	for range 2 {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// disconnected counts members without a connection that have not given
// up.
func (f *fanout) disconnected() int {
	n := 0
	for _, r := range f.rooms {
		for _, m := range r.members {
			m.mu.Lock()
			if m.conn == nil && !m.gone {
				n++
			}
			m.mu.Unlock()
		}
	}
	return n
}

// act performs the kill, signal or drain request at c.After and stores
// when it began in at.
func act(ctx context.Context, c *Config, at *atomic.Int64) error {
	if c.KillCmd == "" && c.KillPID == 0 && c.DrainURL == "" {
		return nil
	}
	if !sleepCtx(ctx, c.After) {
		return nil
	}
	at.Store(time.Now().UnixNano())
	switch {
	case c.KillCmd != "":
		progress(c, "running %q", c.KillCmd)
		if out, err := exec.CommandContext(ctx, "sh", "-c", c.KillCmd).CombinedOutput(); err != nil {
			return fmt.Errorf("kill command %q: %w: %s", c.KillCmd, err, out)
		}
	case c.KillPID != 0:
		sig, err := parseSignal(c.Signal)
		if err != nil {
			return err
		}
		progress(c, "signal %s to %d", c.Signal, c.KillPID)
		if err := syscall.Kill(c.KillPID, sig); err != nil {
			return fmt.Errorf("signal %d: %w", c.KillPID, err)
		}
	}
	if c.DrainURL != "" {
		progress(c, "POST %s", c.DrainURL)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.DrainURL, nil)
		if err != nil {
			return fmt.Errorf("drain request: %w", err)
		}
		// The wsgate admin API takes a state change only with this header
		// (or a JSON body), which a page on another site cannot send.
		req.Header.Set("X-Wsgate-Admin", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("drain request: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("drain request %s answered %s", c.DrainURL, resp.Status)
		}
	}
	return nil
}

// restart starts c.RestartCmd at c.RestartAfter and leaves it running.
func restart(ctx context.Context, c *Config) error {
	if c.RestartCmd == "" || !sleepCtx(ctx, c.RestartAfter) {
		return nil
	}
	progress(c, "starting %q", c.RestartCmd)
	cmd := exec.Command("sh", "-c", c.RestartCmd)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart command %q: %w", c.RestartCmd, err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
