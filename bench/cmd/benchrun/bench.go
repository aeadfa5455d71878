package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
)

// results are what one target measured over the run.
type results struct {
	idle         idleResult
	light, fixed []fanoutResult
	churn        []churnResult
	ladder       ladderResult
	storm        *stormResult // nil when not run
	stormErr     error        // why the storm run failed
	measured     bool
}

// bench runs the fixed scenarios (idle first, on fresh processes, so the
// memory baselines are clean) against every live target, the targets'
// order rotated per repetition, and prints the table.
func (r *runner) bench(ctx context.Context, w io.Writer) error {
	start := time.Now()
	load0 := loadavg()
	p := r.plan
	live := r.live()
	var res [numCols]results
	for _, t := range live {
		res[t.col].measured = true
	}

	// One idle ramp per target: direct first, so relay 1's own growth is
	// measured before it has held any connection.
	for _, t := range rotation(live, 0) {
		r.progress("idle %d %s", p.idleN, t.name())
		x, err := r.idle(ctx, t)
		if err != nil {
			return err
		}
		res[t.col].idle = x
	}
	for i := range p.reps {
		for _, t := range rotation(live, i) {
			r.progress("fanout %d/%d %s", i+1, p.reps, t.name())
			light, err := r.fanout(ctx, t, fmt.Sprintf("fanout%.0f-%d", p.fanLightFPS, i), p.fanLightFPS, p.lightDuration)
			if err != nil {
				return err
			}
			x, err := r.fanout(ctx, t, fmt.Sprintf("fanout%.0f-%d", p.fanFPS, i), p.fanFPS, p.fanDuration)
			if err != nil {
				return err
			}
			for _, f := range []fanoutResult{light, x} {
				if f.failed > 0 {
					return fmt.Errorf("fanout %s: %d failures (logs in %s)", t.name(), f.failed, r.dir)
				}
			}
			res[t.col].light, res[t.col].fixed = append(res[t.col].light, light), append(res[t.col].fixed, x)
		}
	}
	for i := range p.reps {
		for _, t := range rotation(live, i) {
			r.progress("churn %d/%d %s", i+1, p.reps, t.name())
			c, err := r.churn(ctx, t, i)
			if err != nil {
				return err
			}
			res[t.col].churn = append(res[t.col].churn, c)
		}
	}
	// One ladder per target, rotated by one from the idle order.
	for _, t := range rotation(live, 1) {
		r.progress("frame-rate ladder %s", t.name())
		x, err := r.ladder(ctx, t)
		if err != nil {
			return err
		}
		res[t.col].ladder = x
	}
	var rec50, rec99, recMax, back, notBack, lost, dups, dupsResent []float64
	codes := map[string]int64{}
	for i := range p.reps {
		r.progress("drain %d/%d", i+1, p.reps)
		rp, err := r.drain(ctx, i)
		if err != nil {
			return err
		}
		rec50, rec99, recMax = append(rec50, rp.Reconnect.P50), append(rec99, rp.Reconnect.P99), append(recMax, rp.Reconnect.Max)
		back, notBack = append(back, float64(rp.Back)), append(notBack, float64(rp.NotBack))
		lost, dups = append(lost, float64(rp.LostWrites)), append(dups, float64(rp.Duplicates))
		dupsResent = append(dupsResent, float64(rp.DuplicatesResent))
		for c, n := range rp.CloseCodes {
			codes[c] += n
		}
	}

	// Last: it kills relays.
	adm, admErr, err := r.stormPhase(ctx, &res)
	if err != nil {
		return err
	}

	rows := r.rows(res)
	only := func(r row, col int, v float64, text string) row {
		r.vals[col], r.texts[col] = v, text
		return r
	}
	med := fmt.Sprintf("median of %d", p.reps)
	rows = append(rows,
		only(nanRow("reconnect after drain p50 / p99 / max (ms)", "", "relay.v1 drain of 100 clients, admin drain?migrate=1 of relay 1 at 2s, 1001 spread over 2s; "+
			"from the close to the new 101, including the client's random 0-1s wait (-window 1s); wsgate only; "+med), colWSGate, math.NaN(),
			fmt.Sprintf("%.0f / %.0f / %.0f", loadproc.Median(rec50), loadproc.Median(rec99), loadproc.Median(recMax))),
		only(nanRow("clients back / not back after drain", "", med), colWSGate, math.NaN(),
			fmt.Sprintf("%.0f / %.0f", loadproc.Median(back), loadproc.Median(notBack))),
		only(nanRow("lost writes / duplicates after drain", "", "close codes seen: "+codesText(codes)+"; "+med), colWSGate, math.NaN(),
			fmt.Sprintf("%.0f / %.0f (resent dups %.0f)", loadproc.Median(lost), loadproc.Median(dups), loadproc.Median(dupsResent))),
	)
	rows = append(rows, stormRows(&res, adm, admErr, p)...)
	fmt.Fprintf(w, "wsgate benchmark (%s), %s\n\n", modeName(p), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, %s; load average %s at start, %s at end; took %v\n\n",
		runtime.NumCPU(), cpuModel(), kernel(), runtime.Version(), load0, loadavg(), time.Since(start).Round(time.Second))
	if err := writeTable(w, rows); err != nil {
		return err
	}
	for _, t := range r.targets {
		if t.addr == "" {
			fmt.Fprintf(w, "\n%s: not measured: %s\n", colHeaders[t.col], t.why)
		}
	}
	for i := range res {
		if err := res[i].stormErr; err != nil {
			fmt.Fprintf(w, "\nstorm through %s failed: %v\n", colHeaders[i], err)
		}
	}
	if admErr != nil {
		fmt.Fprintf(w, "\nstorm with admission failed: %v\n", admErr)
	}
	return nil
}

// rows are the table's rows of the per-target figures.
func (r *runner) rows(res [numCols]results) []row {
	p := r.plan
	med := fmt.Sprintf("median of %d", p.reps)
	// per fills a row with f of each measured target's results.
	per := func(rw row, f func(x *results) float64) row {
		for i := range res {
			if res[i].measured {
				rw.vals[i] = f(&res[i])
			}
		}
		return rw
	}
	pick := func(rs []fanoutResult, f func(fanoutResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, x := range rs {
			xs[i] = f(x)
		}
		return loadproc.Median(xs)
	}
	p50 := func(x fanoutResult) float64 { return x.p50 }
	p99 := func(x fanoutResult) float64 { return x.p99 }
	fanShape := fmt.Sprintf("fanout %d rooms × %d members, 64 B", p.fanRooms, p.fanMembers)
	fixed := fmt.Sprintf("%s, %.4g msg/s each = %.0f frames/s, %v; %s", fanShape, p.memberRate(p.fanFPS), p.fanFPS, p.fanDuration, med)
	light := fmt.Sprintf("%s, %.4g msg/s each = %.0f frames/s, %v; %s", fanShape, p.memberRate(p.fanLightFPS), p.fanLightFPS, p.lightDuration, med)

	memory := per(nanRow("memory per idle connection (bytes)", "%.0f",
		fmt.Sprintf("VmRSS growth / %d idle connections; direct = relay-backend; nginx = master + worker; one run each", p.idleN)),
		func(x *results) float64 { return x.idle.perConn })
	kernelMem := per(nanRow("kernel memory per idle connection (bytes)", "%.0f",
		"/proc/slabinfo growth, whole system (wsload's sockets included), in the same ramps; n/a unless run as root"),
		func(x *results) float64 { return x.idle.kernelPer })
	loadMem := per(nanRow("wsload memory per idle connection (bytes)", "%.0f", "wsload's own rss_per_conn_bytes in the same runs"),
		func(x *results) float64 { return x.idle.loadPerConn })
	dropped := per(nanRow("idle connections dropped", "%.0f", fmt.Sprintf("of %d held", p.idleN)),
		func(x *results) float64 { return float64(x.idle.dropped) })
	split := nanRow("balance split (connections per relay)", "", "each relay's /info during the idle hold; least_conn / leastconn")
	for i := range res {
		if res[i].measured && i != colDirect {
			split.texts[i] = splitText(res[i].idle.split)
		}
	}
	cpu := per(nanRow("CPU seconds per million frames", "%.2f",
		"utime+stime / wsload's sent+received; direct = both relays; wsgate, nginx (master + worker), HAProxy = the proxy alone; "+fixed),
		func(x *results) float64 { return pick(x.fixed, func(f fanoutResult) float64 { return f.cpuPerMframe }) })
	share := per(nanRow("proxy CPU / relays' CPU, same fanout", "%.2f", "the proxy's CPU over both relays' in the same run; "+med),
		func(x *results) float64 {
			return pick(x.fixed, func(f fanoutResult) float64 { return f.cpu.Seconds() / f.relayCPU.Seconds() })
		})
	share.vals[colDirect] = math.NaN()
	system := nanRow("proxy + relays CPU seconds per million frames", "%.2f",
		"utime+stime of the proxy and both relays / wsload's sent+received; direct = both relays (the CPU row); "+fixed)
	for i := range res {
		if res[i].measured {
			system.vals[i] = pick(res[i].fixed, func(f fanoutResult) float64 {
				c := f.relayCPU
				if i != colDirect {
					c += f.cpu
				}
				return c.Seconds() / f.frames * 1e6
			})
		}
	}
	rows := []row{memory, kernelMem, loadMem, dropped, split, cpu, share, system}

	addRows := func(rs func(x *results) []fanoutResult, fps float64, note string) {
		r50 := per(nanRow(fmt.Sprintf("latency p50 (ms), %.0f frames/s", fps), "%.2f", note),
			func(x *results) float64 { return pick(rs(x), p50) })
		r99 := per(nanRow(fmt.Sprintf("latency p99 (ms), %.0f frames/s", fps), "%.2f", note),
			func(x *results) float64 { return pick(rs(x), p99) })
		added := nanRow(fmt.Sprintf("added latency p50 / p99 (ms), %.0f frames/s", fps), "", "proxy minus direct, the two rows above")
		for i := range res {
			if res[i].measured && i != colDirect {
				added.texts[i] = fmt.Sprintf("%+.2f / %+.2f", r50.vals[i]-r50.vals[colDirect], r99.vals[i]-r99.vals[colDirect])
			}
		}
		rows = append(rows, r50, r99, added)
	}
	addRows(func(x *results) []fanoutResult { return x.light }, p.fanLightFPS, light)
	addRows(func(x *results) []fanoutResult { return x.fixed }, p.fanFPS, fixed)

	steps := make([]string, len(p.ladder))
	for i, f := range p.ladder {
		steps[i] = fmt.Sprintf("%.0fk", f/1000)
	}
	ladder := nanRow(fmt.Sprintf("most frames/s with p99 under %d ms", ladderP99), "",
		fmt.Sprintf("%s, %v per step, steps %s frames/s; the highest step with p99 < %d ms, delivered >= 99.9%%, no failure (a step missed is tried once more); the whole stack shares the CPUs; one ladder each",
			fanShape, p.ladderDuration, strings.Join(steps, " / "), ladderP99))
	for i := range res {
		if res[i].measured {
			ladder.texts[i] = ladderText(res[i].ladder)
		}
	}
	delivered := per(nanRow("fanout delivered (%)", "%.2f", "every fixed-rate and light fanout; median"),
		func(x *results) float64 {
			return pick(slices.Concat(x.fixed, x.light), func(f fanoutResult) float64 { return f.delivered })
		})
	hps := per(nanRow("handshakes per second (churn)", "%.0f",
		fmt.Sprintf("churn -c %d, %v, connect + one round trip + close; %s", p.churnWorkers, p.churnDuration, med)),
		func(x *results) float64 { return churnMedian(x.churn, func(c churnResult) float64 { return c.hps }) })
	rtt := per(nanRow("churn round trip p50 (ms)", "%.2f", med),
		func(x *results) float64 { return churnMedian(x.churn, func(c churnResult) float64 { return c.rtt50 }) })
	cpuPer := per(nanRow("CPU per handshake (µs)", "%.0f",
		"utime+stime over the churn run / handshakes; direct = relay 1 (which also serves the round trip); the proxies = the proxy alone, its share of the round trip's frames and the closes included; "+med),
		func(x *results) float64 { return churnMedian(x.churn, func(c churnResult) float64 { return c.cpuPer }) })
	kernelPer := per(nanRow("of which in the kernel (µs)", "%.0f", "stime over the churn run / handshakes, the same processes; "+med),
		func(x *results) float64 {
			return churnMedian(x.churn, func(c churnResult) float64 { return c.kernelPer })
		})
	return append(rows, ladder, delivered, hps, rtt, cpuPer, kernelPer)
}

// churnMedian is the median of f over the churn runs.
func churnMedian(cs []churnResult, f func(churnResult) float64) float64 {
	xs := make([]float64, len(cs))
	for i, c := range cs {
		xs[i] = f(c)
	}
	return loadproc.Median(xs)
}

// ladderText shows a ladder's result: the highest step held and its p99,
// "≥" when every step held, "<" when none did.
func ladderText(l ladderResult) string {
	switch {
	case l.held == 0:
		return fmt.Sprintf("< %.0f", l.failed)
	case l.failed == 0:
		return fmt.Sprintf("≥ %.0f (p99 %.1f)", l.held, l.p99)
	}
	return fmt.Sprintf("%.0f (p99 %.1f)", l.held, l.p99)
}

func modeName(p plan) string {
	if p.reps == quickPlan.reps && p.idleN == quickPlan.idleN {
		return "BENCH_QUICK=1"
	}
	return "full"
}

func (r *runner) progress(format string, a ...any) {
	fmt.Fprintf(r.log, "benchrun: "+format+" (load %s)\n", append(a, loadavg())...)
}

func splitText(split []int) string {
	s := make([]string, len(split))
	for i, n := range split {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " / ")
}

func codesText(c map[string]int64) string {
	if len(c) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = fmt.Sprintf("%s×%d", k, c[k])
	}
	return strings.Join(s, ", ")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return "?"
	}
	return f[0]
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func kernel() string {
	b, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
