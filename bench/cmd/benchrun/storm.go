package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/internal/stack"
	"github.com/wsgate/wsgate/bench/loadgen"
)

// The storm's fixed shape, in both modes: the clients connect at
// stormConnectRate, relay 1 is killed stormAfter once all have joined,
// and each client dropped waits a random delay below one second, then
// backs off (wsload: 100 ms doubling to 2 s) until stormGiveUp.
// stormWindow is how long the members keep sending after the kill, long
// enough for the run with admission (the clients of relay 1 at
// stormAdmissionRate a second: 8 s for 2,000).
const (
	stormConnectRate = 1000
	stormAfter       = 3 * time.Second
	stormGiveUp      = 30 * time.Second
	stormSettle      = 10 * time.Second
	// stormAdmissionRate and stormAdmissionBurst are the
	// [pools.admission] rate (per second) and burst of the run with
	// admission, set just before the kill: storm.sh's defaults.
	stormAdmissionRate  = 250
	stormAdmissionBurst = 250
	// stormSample is the interval of the CPU samples.
	stormSample = 100 * time.Millisecond
)

// stormResult is what one storm run measured.
type stormResult struct {
	clients  int   // clients connected before the kill
	onRelay1 int   // of them on relay 1 when it was killed
	back     int64 // clients back after the kill
	notBack  int64 // clients that gave up
	lost     int64 // wsload's lost_writes
	tries    int64
	codes    loadgen.Counts
	// lastBack is the time from the kill until the last client was back;
	// only meaningful when notBack is 0.
	lastBack time.Duration
	// peak is the proxy's most CPU over one second from the kill until
	// the last client was back (at least one second), percent of one
	// core; cpu its CPU time over that span.
	peak float64
	cpu  time.Duration
}

// cpuSample is one reading of a target's CPU time (utime+stime of its
// processes), at a time counted from the kill.
type cpuSample struct {
	at  time.Duration
	cpu time.Duration
}

// stormCPU reads samples taken every stormSample or so from the kill (the
// first at or near 0) and returns the CPU time spent from the kill until
// end, and the most CPU spent over one second between the kill and
// max(end, 1 s), as a percentage of one core: over each window from a
// sample to the latest sample at least 1 s before it (so a late sample
// lengthens a window rather than losing it). Each bound is the first
// sample at or after it (the last sample when none is). The peak is NaN
// when the samples span less than a second.
func stormCPU(samples []cpuSample, end time.Duration) (peak float64, total time.Duration) {
	if len(samples) == 0 {
		return math.NaN(), 0
	}
	upTo := func(d time.Duration) int {
		for i, s := range samples {
			if s.at >= d {
				return i
			}
		}
		return len(samples) - 1
	}
	total = samples[upTo(end)].cpu - samples[0].cpu
	peak = math.NaN()
	last := upTo(max(end, time.Second))
	j := -1 // the latest sample at least 1 s before sample i
	for i := 1; i <= last; i++ {
		for j+1 < i && samples[i].at-samples[j+1].at >= time.Second {
			j++
		}
		if j < 0 {
			continue
		}
		span := samples[i].at - samples[j].at
		p := float64(samples[i].cpu-samples[j].cpu) / float64(span) * 100
		if math.IsNaN(peak) || p > peak {
			peak = p
		}
	}
	return peak, total
}

// stormRuns are the storm phase's runs over the live targets: each HTTP/1.1
// proxy once (wsgate h2 reaches the relays over HTTP/2 and is left out),
// then the gateway with its defaults once more with [pools.admission].
func stormRuns(live []*target) (runs []*target, admission *target) {
	for _, t := range live {
		switch t.col {
		case colWSGate, colWSGate1, colNginx, colHAProxy:
			runs = append(runs, t)
		}
		if t.col == colWSGate {
			admission = t
		}
	}
	return runs, admission
}

// storm runs one reconnect storm through target t: relay 1 is brought back
// if an earlier run killed it, t must reach it again, r.plan.stormClients
// relay.v1 clients connect through t (2 per room, one message every 10 s
// each), relay 1 is killed with SIGKILL by wsload stormAfter after they
// all joined, and the clients it held reconnect through t to relay 2.
// With admission, the gateway (t is the gateway with its defaults) gets
// [pools.admission] by a reload once the clients have joined, before the
// kill, and its config back after the run. t's CPU is sampled every
// stormSample from the kill until wsload ends.
func (r *runner) storm(ctx context.Context, t *target, admission bool) (*stormResult, error) {
	name := "storm-" + t.name()
	if admission {
		name += "-admission"
	}
	relay1 := r.st.Relays[0]
	select {
	case <-relay1.Done():
		rl, err := r.st.RestartRelay(relay1.Name)
		if err != nil {
			return nil, err
		}
		relay1 = rl
	default:
	}
	if err := loadproc.WaitIdle(r.st.Relays, r.dir); err != nil {
		return nil, err
	}
	if err := reaches(ctx, t.addr, relay1.Name); err != nil {
		return nil, fmt.Errorf("%s: %w", t.name(), err)
	}
	pids, err := t.pids()
	if err != nil {
		return nil, err
	}
	n := r.plan.stormClients
	window := r.plan.stormWindow
	l, err := r.startLoad(ctx, name, "kill", "-url", r.url(t.addr, "storm"),
		"-rooms", strconv.Itoa(n/2), "-members", "2", "-rate", "0.1", "-connect-rate", strconv.Itoa(stormConnectRate),
		"-duration", (stormAfter + window).String(), "-after", stormAfter.String(), "-window", "1s",
		"-give-up", stormGiveUp.String(), "-settle", stormSettle.String(),
		"-kill-pid", strconv.Itoa(relay1.Pid()), "-signal", "KILL")
	if err != nil {
		return nil, err
	}
	res, samples, err := r.stormRun(ctx, t, l, relay1, pids, admission)
	if err != nil {
		// wsload stops at the end of its run; wait for it so that the
		// next run starts on empty relays.
		<-l.done
		return nil, err
	}
	rep, err := l.wait(r.dir)
	if err != nil {
		return nil, err
	}
	res.back, res.notBack, res.lost, res.tries, res.codes = rep.Back, rep.NotBack, rep.LostWrites, rep.Tries, rep.CloseCodes
	end := stormGiveUp
	if rep.NotBack == 0 && rep.BackAllMS > 0 {
		res.lastBack = time.Duration(rep.BackAllMS * float64(time.Millisecond))
		end = res.lastBack
	}
	res.peak, res.cpu = stormCPU(samples, end)
	r.progress("%s: %d clients, %d on relay 1; back %d, not back %d, last back %v, lost writes %d, tries %d, close codes %s; peak CPU %.0f%%, %.2f CPU-s",
		name, res.clients, res.onRelay1, res.back, res.notBack, res.lastBack.Round(time.Millisecond), res.lost, res.tries,
		codesText(res.codes), res.peak, res.cpu.Seconds())
	return res, nil
}

// stormRun follows wsload's run l through t: it waits until every client
// has joined, sets the admission rate when asked, waits for relay 1 to
// die, then samples the CPU of t's processes (pids) until wsload ends.
func (r *runner) stormRun(ctx context.Context, t *target, l *loadRun, relay1 *stack.Relay, pids []int, admission bool) (*stormResult, []cpuSample, error) {
	res := &stormResult{}
	var samples []cpuSample
	n := r.plan.stormClients
	deadline := time.Now().Add(time.Duration(n)*time.Second/stormConnectRate + 30*time.Second)
	for {
		got, err := t.conns()
		if err != nil {
			return nil, nil, err
		}
		if got >= n {
			res.clients = got
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("storm %s: %d of %d clients joined after the ramp", t.name(), got, n)
		}
		select {
		case <-l.done:
			return nil, nil, fmt.Errorf("storm %s: wsload ended with %d of %d clients joined (see %s.log)", t.name(), got, n, l.name)
		case <-relay1.Done():
			return nil, nil, fmt.Errorf("storm %s: relay 1 died before the clients joined", t.name())
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(stormSample):
		}
	}
	info, err := relay1.Info()
	if err != nil {
		return nil, nil, err
	}
	res.onRelay1 = info.Connections
	if res.onRelay1 < n/4 {
		return nil, nil, fmt.Errorf("storm %s: relay 1 holds %d of %d clients; the kill would not be a storm", t.name(), res.onRelay1, n)
	}
	if admission {
		restore, err := r.setAdmission()
		if err != nil {
			return nil, nil, err
		}
		defer func() {
			if err := restore(); err != nil {
				r.progress("storm: the gateway's config was not restored: %v", err)
			}
		}()
		select {
		case <-relay1.Done():
			return nil, nil, fmt.Errorf("storm %s: the admission rate was set after the kill", t.name())
		default:
		}
	}
	select {
	case <-relay1.Done():
	case <-l.done:
		return nil, nil, fmt.Errorf("storm %s: wsload ended before relay 1 was killed (see %s.log)", t.name(), l.name)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(stormAfter + 30*time.Second):
		return nil, nil, fmt.Errorf("storm %s: relay 1 still runs %v after the clients joined", t.name(), stormAfter+30*time.Second)
	}
	killed := time.Now()
	// Bounded by wsload's own end: its window, give-up and settle, and a
	// margin for the closes.
	maxSamples := int((r.plan.stormWindow + stormGiveUp + stormSettle + time.Minute) / stormSample)
	tick := time.NewTicker(stormSample)
	defer tick.Stop()
	for range maxSamples {
		c, err := probe.CPUSum(pids)
		if err != nil {
			return nil, nil, err
		}
		samples = append(samples, cpuSample{at: time.Since(killed), cpu: c})
		select {
		case <-l.done:
			return res, samples, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-tick.C:
		}
	}
	return nil, nil, fmt.Errorf("storm %s: wsload still runs %v after the kill", t.name(), time.Since(killed).Round(time.Second))
}

// setAdmission gives the gateway with its defaults a [pools.admission]
// rate and burst by a reload and returns the function that restores its
// config.
func (r *runner) setAdmission() (restore func() error, err error) {
	g := r.st.Gateways[0]
	orig, err := os.ReadFile(g.Config)
	if err != nil {
		return nil, err
	}
	text, err := stack.WithAdmission(string(orig), stormAdmissionRate, stormAdmissionBurst)
	if err != nil {
		return nil, err
	}
	if err := g.Reconfigure(text); err != nil {
		return nil, err
	}
	return func() error { return g.Reconfigure(string(orig)) }, nil
}

// reaches polls GET /info through the proxy at addr, every 50 ms for at
// most 30 s, until the relay named id answers one: the proxy routes to it
// again (after a restart, once its health check or its failure timeout has
// let it back).
func reaches(ctx context.Context, addr, id string) error {
	var last error
	for range 600 {
		info, err := stack.ReadInfo(addr)
		if err == nil && info.Replica == id {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not reached through %s in 30s (last error: %v)", id, addr, last)
}

// stormPhase runs the storm through each HTTP/1.1 proxy, then through the
// gateway with admission. A run that fails is reported under the table
// (errs, by column; admErr for the run with admission) and does not end
// the benchmark; a cancelled context does.
func (r *runner) stormPhase(ctx context.Context, res *[numCols]results) (adm *stormResult, admErr error, err error) {
	runs, admTarget := stormRuns(r.live())
	for _, t := range runs {
		r.progress("storm %d clients %s", r.plan.stormClients, t.name())
		x, err := r.storm(ctx, t, false)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		res[t.col].storm, res[t.col].stormErr = x, err
		if err != nil {
			r.progress("storm %s failed: %v", t.name(), err)
		}
	}
	if admTarget == nil {
		return nil, errors.New("the gateway was not measured"), nil
	}
	r.progress("storm %d clients %s with admission rate %d burst %d", r.plan.stormClients, admTarget.name(), stormAdmissionRate, stormAdmissionBurst)
	adm, admErr = r.storm(ctx, admTarget, true)
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if admErr != nil {
		r.progress("storm %s with admission failed: %v", admTarget.name(), admErr)
	}
	return adm, admErr, nil
}

// stormRows are the table's storm rows: one figure per HTTP/1.1 proxy
// (res[i].storm; "failed" where the run failed), then the run with
// admission as one row whose gateway cell holds its five figures.
func stormRows(res *[numCols]results, adm *stormResult, admErr error, p plan) []row {
	last := nanRow("storm: last client back after a relay is killed (s)", "%.2f",
		fmt.Sprintf("relay.v1 kill: %d clients (2 per room, one message per 10 s each) through the proxy, about half on each relay; "+
			"relay 1 killed with SIGKILL %v after all joined; from the kill until the last client's new 101 (wsload back_all_ms); "+
			"a client waits a random 0-1 s, then backs off 100 ms doubling to 2 s, gives up after %v; "+
			"HTTP/1.1 proxies; one run each, last in the run, relay 1 restarted on its address before each",
			p.stormClients, stormAfter, stormGiveUp))
	back := nanRow("storm: clients back / not back", "", "of those relay 1 held; close codes seen: ")
	lost := nanRow("storm: lost writes", "%.0f", "wsload lost_writes: ACKed writes some member never got, plus writes never ACKed and never resent")
	peak := nanRow("storm: proxy peak CPU (% of a core, 1 s)", "%.0f",
		"utime+stime of the proxy's processes (nginx: master + worker) read every 100 ms from the kill; the most over one second (from a sample to the latest one at least 1 s before it) until the last client was back, or over the first second")
	cpu := nanRow("storm: proxy CPU-s over the storm", "%.2f",
		"the same processes' CPU time from the kill until the last client was back (until the give-up when one was not)")
	var codes []string
	for i := range res {
		x, err := res[i].storm, res[i].stormErr
		switch {
		case err != nil:
			for _, rw := range []*row{&last, &back, &lost, &peak, &cpu} {
				rw.texts[i] = "failed"
			}
			continue
		case x == nil:
			continue
		}
		if x.notBack > 0 {
			last.texts[i] = fmt.Sprintf("%d not back", x.notBack)
		} else {
			last.vals[i] = x.lastBack.Seconds()
		}
		back.texts[i] = fmt.Sprintf("%d / %d", x.back, x.notBack)
		lost.vals[i] = float64(x.lost)
		peak.vals[i] = x.peak
		cpu.vals[i] = x.cpu.Seconds()
		codes = append(codes, colHeaders[i]+" "+codesText(x.codes))
	}
	if len(codes) == 0 {
		codes = []string{"none"}
	}
	back.note += strings.Join(codes, "; ")
	admRow := nanRow("storm with admission: last client back (s); back / not back; lost writes; peak CPU (%); CPU-s", "",
		fmt.Sprintf("the same storm through wsgate once more, with [pools.admission] rate = %d, burst = %d set by a reload once the clients joined, just before the kill; one run",
			stormAdmissionRate, stormAdmissionBurst))
	switch {
	case admErr != nil:
		admRow.texts[colWSGate] = "failed"
	case adm != nil:
		lastText := fmt.Sprintf("%.2f", adm.lastBack.Seconds())
		if adm.notBack > 0 {
			lastText = fmt.Sprintf("%d not back", adm.notBack)
		}
		admRow.texts[colWSGate] = fmt.Sprintf("%s; %d / %d; %d; %.0f; %.2f", lastText, adm.back, adm.notBack, adm.lost, adm.peak, adm.cpu.Seconds())
	}
	return []row{last, back, lost, peak, cpu, admRow}
}
