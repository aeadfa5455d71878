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
)

// bench runs the fixed scenarios in order (idle first, on a fresh gateway,
// so its memory baseline is clean) and prints the table.
func (r *runner) bench(ctx context.Context, w io.Writer) error {
	start := time.Now()
	load0 := loadavg()
	p := r.plan
	r.progress("idle %d direct", p.idleN)
	idleD, err := r.idle(ctx, false)
	if err != nil {
		return err
	}
	r.progress("idle %d through the gateway", p.idleN)
	idleT, err := r.idle(ctx, true)
	if err != nil {
		return err
	}

	var fanD, fanT, lightD, lightT []fanoutResult
	for i := range p.reps {
		r.progress("fanout %d/%d", i+1, p.reps)
		// Odd repetitions go through the gateway first, so neither side
		// always runs later (when other work on the machine has started).
		for _, through := range order(i) {
			light, err := r.fanout(ctx, through, i, p.fanLightRate)
			if err != nil {
				return err
			}
			x, err := r.fanout(ctx, through, i, p.fanRate)
			if err != nil {
				return err
			}
			if through {
				fanT, lightT = append(fanT, x), append(lightT, light)
			} else {
				fanD, lightD = append(fanD, x), append(lightD, light)
			}
		}
	}
	var hpsD, hpsT, rttD, rttT []float64
	for i := range p.reps {
		r.progress("churn %d/%d", i+1, p.reps)
		for _, through := range order(i) {
			h, rt, err := r.churn(ctx, through, i)
			if err != nil {
				return err
			}
			if through {
				hpsT, rttT = append(hpsT, h), append(rttT, rt)
			} else {
				hpsD, rttD = append(hpsD, h), append(rttD, rt)
			}
		}
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

	pick := func(rs []fanoutResult, f func(fanoutResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, x := range rs {
			xs[i] = f(x)
		}
		return median(xs)
	}
	p50 := func(x fanoutResult) float64 { return x.p50 }
	p99 := func(x fanoutResult) float64 { return x.p99 }
	p50D, p50T, p99D, p99T := pick(fanD, p50), pick(fanT, p50), pick(fanD, p99), pick(fanT, p99)
	l50D, l50T, l99D, l99T := pick(lightD, p50), pick(lightT, p50), pick(lightD, p99), pick(lightT, p99)
	gwShare := pick(fanT, func(x fanoutResult) float64 { return x.cpu.Seconds() / x.relayCPU.Seconds() })
	med := fmt.Sprintf("median of %d", p.reps)
	fan := fmt.Sprintf("fanout %d rooms × %d members, %d msg/s each, 64 B, %v; %s", p.fanRooms, p.fanMembers, p.fanRate, p.fanDuration, med)
	light := fmt.Sprintf("fanout %d rooms × %d members, %d msg/s each, 64 B, %v; %s", p.fanRooms, p.fanMembers, p.fanLightRate, p.fanDuration, med)
	nan := math.NaN()
	rows := []row{
		{figure: "memory per idle connection (bytes)", direct: idleD.perConn, through: idleT.perConn, format: "%.0f",
			note: fmt.Sprintf("VmRSS growth / %d idle connections; direct = relay-backend, through = wsgate", p.idleN)},
		{figure: "wsload memory per idle connection (bytes)", direct: idleD.loadPerConn, through: idleT.loadPerConn, format: "%.0f",
			note: "wsload's own rss_per_conn_bytes in the same runs"},
		{figure: "idle connections dropped", direct: float64(idleD.dropped), through: float64(idleT.dropped), format: "%.0f",
			note: fmt.Sprintf("connected %d / %d", idleD.connected, idleT.connected)},
		{figure: "balance split (connections per relay)", direct: nan, through: nan, text: splitText(idleT.split),
			note: "each relay's /info during the idle hold, least_conn"},
		{figure: "CPU seconds per million frames", direct: pick(fanD, func(x fanoutResult) float64 { return x.cpuPerMframe }),
			through: pick(fanT, func(x fanoutResult) float64 { return x.cpuPerMframe }), format: "%.2f",
			note: "direct = both relays' utime+stime / (sent+received); through = wsgate's / wsgate_frames_total delta; " + fan},
		{figure: "gateway CPU / relays' CPU, same fanout", direct: nan, through: gwShare, format: "%.2f",
			note: "through-gateway fanout; " + med},
		{figure: fmt.Sprintf("latency p50 (ms), %d msg/s per member", p.fanLightRate), direct: l50D, through: l50T, format: "%.2f", note: light},
		{figure: fmt.Sprintf("latency p99 (ms), %d msg/s per member", p.fanLightRate), direct: l99D, through: l99T, format: "%.2f", note: light},
		{figure: "added latency p50 / p99 (ms), light", direct: nan, through: nan, text: fmt.Sprintf("%+.2f / %+.2f", l50T-l50D, l99T-l99D),
			note: "through minus direct, the two rows above"},
		{figure: fmt.Sprintf("latency p50 (ms), %d msg/s per member", p.fanRate), direct: p50D, through: p50T, format: "%.2f", note: fan},
		{figure: fmt.Sprintf("latency p99 (ms), %d msg/s per member", p.fanRate), direct: p99D, through: p99T, format: "%.2f", note: fan},
		{figure: "added latency p50 / p99 (ms), loaded", direct: nan, through: nan, text: fmt.Sprintf("%+.2f / %+.2f", p50T-p50D, p99T-p99D),
			note: "through minus direct, the two rows above"},
		{figure: "fanout delivered (%)", direct: pick(slices.Concat(fanD, lightD), func(x fanoutResult) float64 { return x.delivered }),
			through: pick(slices.Concat(fanT, lightT), func(x fanoutResult) float64 { return x.delivered }), format: "%.2f", note: "every fanout run; median"},
		{figure: "handshakes per second (churn)", direct: median(hpsD), through: median(hpsT), format: "%.0f",
			note: fmt.Sprintf("churn -c 10, %v, connect + one round trip + close; %s", p.churnDuration, med)},
		{figure: "churn round trip p50 (ms)", direct: median(rttD), through: median(rttT), format: "%.2f", note: med},
		{figure: "reconnect after drain p50 / p99 / max (ms)", direct: nan, through: nan,
			text: fmt.Sprintf("%.0f / %.0f / %.0f", median(rec50), median(rec99), median(recMax)),
			note: "relay.v1 drain of 100 clients, admin drain?migrate=1 of relay 1 at 2s, 1001 spread over 2s; from the close to the new 101, including the client's random 0-1s wait (-window 1s); " + med},
		{figure: "clients back / not back after drain", direct: nan, through: nan,
			text: fmt.Sprintf("%.0f / %.0f", median(back), median(notBack)), note: med},
		{figure: "lost writes / duplicates after drain", direct: nan, through: nan,
			text: fmt.Sprintf("%.0f / %.0f (resent dups %.0f)", median(lost), median(dups), median(dupsResent)),
			note: "close codes seen: " + codesText(codes) + "; " + med},
	}
	fmt.Fprintf(w, "wsgate benchmark (%s), %s\n\n", modeName(p), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, %s; load average %s at start, %s at end; took %v\n\n",
		runtime.NumCPU(), cpuModel(), kernel(), runtime.Version(), load0, loadavg(), time.Since(start).Round(time.Second))
	return writeTable(w, rows)
}

// order is the order of repetition i: direct first on even i, through the
// gateway first on odd i.
func order(i int) []bool {
	if i%2 == 1 {
		return []bool{true, false}
	}
	return []bool{false, true}
}

func modeName(p plan) string {
	if p == quickPlan {
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
