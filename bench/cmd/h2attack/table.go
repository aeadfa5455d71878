package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// result is what one run of one attack measured.
type result struct {
	// attack is the attack's key (14-19).
	attack string
	// base and under are the victims' figures before and during the attack.
	base, under victimStats
	// rssBefore is the gateway's VmRSS just before the attack, rssPeak the
	// most it held during it (VmHWM after a reset, or the highest sample),
	// rssFirst and rssSecond the highest samples of each half of the
	// attack (a second half well over the first is memory still growing).
	rssBefore, rssPeak, rssFirst, rssSecond int64
	// cpu is the gateway's CPU time (utime+stime) over the attack, wall
	// the attack's length.
	cpu, wall time.Duration
	// selfCPU is this process's CPU time over the attack: the attacker's
	// clients and flooding nodes (the victims run in a process of their
	// own).
	selfCPU time.Duration
	// logLines is how many lines the gateway logged during the attack.
	logLines int
	// got says what the attacker got (cut, GOAWAY code, answers), and for
	// rapid reset the node handshakes against the streams reset.
	got string
}

// victimStats are the round trips of the victims over one period.
type victimStats struct {
	p50, p99  time.Duration
	sent, ok  int
	firstFail string
}

// ratio is the victims' p99 under attack over their baseline p99.
func (r result) ratio() float64 {
	if r.base.p99 <= 0 {
		return 0
	}
	return float64(r.under.p99) / float64(r.base.p99)
}

// delivered is the share of the victims' operations under attack that
// succeeded, in percent.
func (v victimStats) delivered() float64 {
	if v.sent == 0 {
		return 0
	}
	return 100 * float64(v.ok) / float64(v.sent)
}

// cpuShare is the gateway's CPU over the attack in percent of one core.
func (r result) cpuShare() float64 {
	if r.wall <= 0 {
		return 0
	}
	return 100 * float64(r.cpu) / float64(r.wall)
}

// selfShare is the attacking process's CPU over the attack in percent of one core.
func (r result) selfShare() float64 {
	if r.wall <= 0 {
		return 0
	}
	return 100 * float64(r.selfCPU) / float64(r.wall)
}

// summary is an attack's runs reduced to medians; got is the attacker's
// outcome of the run whose p99 ratio is the median.
type summary struct {
	attack                      string
	p50b, p50u, p99b, p99u      time.Duration
	ratio, delivered, cpu, self float64
	rssBefore, rssPeak          int64
	logLines                    int
	got                         string
	runs                        int
}

// summarize reduces the runs of one attack to their medians.
func summarize(runs []result) summary {
	s := summary{runs: len(runs)}
	if len(runs) == 0 {
		return s
	}
	s.attack = runs[0].attack
	durs := func(f func(result) time.Duration) time.Duration {
		v := make([]time.Duration, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	floats := func(f func(result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	ints := func(f func(result) int64) int64 {
		v := make([]int64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	s.p50b = durs(func(r result) time.Duration { return r.base.p50 })
	s.p50u = durs(func(r result) time.Duration { return r.under.p50 })
	s.p99b = durs(func(r result) time.Duration { return r.base.p99 })
	s.p99u = durs(func(r result) time.Duration { return r.under.p99 })
	s.ratio = floats(result.ratio)
	s.delivered = floats(func(r result) float64 { return r.under.delivered() })
	s.cpu = floats(result.cpuShare)
	s.self = floats(result.selfShare)
	s.rssBefore = ints(func(r result) int64 { return r.rssBefore })
	s.rssPeak = ints(func(r result) int64 { return r.rssPeak })
	s.logLines = int(ints(func(r result) int64 { return int64(r.logLines) }))
	byRatio := slices.Clone(runs)
	slices.SortStableFunc(byRatio, func(a, b result) int {
		switch x, y := a.ratio(), b.ratio(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	s.got = byRatio[len(byRatio)/2].got
	return s
}

// median is the middle value of v (the upper one of an even count); v is
// reordered.
func median[T int64 | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// attackNames are the table's first column.
var attackNames = map[string]string{
	"14": "14 node PING flood, not reading",
	"15": "15 slow POST bodies (6 x 100 streams)",
	"16": "16 client SETTINGS flood (3 conns)",
	"17": "17 client WINDOW_UPDATE(0,1) flood (3 conns)",
	"18": "18 node SETTINGS flood, not reading",
	"19": "19 rapid reset of WebSocket streams (3 conns)",
}

// writeTable prints one row per attack, each the medians of its runs.
func writeTable(w io.Writer, sums []summary) {
	fmt.Fprintln(w, "| attack | victims' p50 before → during | victims' p99 before → during | p99 ratio | victims' delivered during | gateway RSS before → peak | gateway CPU during | attacker's CPU | gateway log lines during | the attacker got (median run) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, s := range sums {
		name := attackNames[s.attack]
		if name == "" {
			name = s.attack
		}
		fmt.Fprintf(w, "| %s | %s → %s | %s → %s | %.2f | %s | %s → %s | %.0f %% | %.0f %% | %d | %s |\n",
			name, fmtDur(s.p50b), fmtDur(s.p50u), fmtDur(s.p99b), fmtDur(s.p99u), s.ratio,
			fmtPercent(s.delivered), fmtBytes(s.rssBefore), fmtBytes(s.rssPeak), s.cpu, s.self, s.logLines,
			strings.ReplaceAll(s.got, "|", "/"))
	}
}

// writeRuns prints each run on a line of its own, under the table.
func writeRuns(w io.Writer, runs []result) {
	for _, r := range runs {
		fmt.Fprintf(w, "  %s: p50 %s → %s, p99 %s → %s (x%.2f), delivered %d/%d before, %d/%d during%s; RSS %s → %s (halves %s, %s); CPU %.0f %% (the attacker %.0f %%); %d log lines; %s\n",
			r.attack, fmtDur(r.base.p50), fmtDur(r.under.p50), fmtDur(r.base.p99), fmtDur(r.under.p99), r.ratio(),
			r.base.ok, r.base.sent, r.under.ok, r.under.sent, failNote(r.under.firstFail),
			fmtBytes(r.rssBefore), fmtBytes(r.rssPeak), fmtBytes(r.rssFirst), fmtBytes(r.rssSecond), r.cpuShare(), r.selfShare(), r.logLines, r.got)
	}
}

func failNote(s string) string {
	if s == "" {
		return ""
	}
	return " (first failure: " + s + ")"
}

// fmtDur prints a round trip in ms with two significant decimals below
// 10 ms, as "1.23 ms", "45 ms", "1.2 s".
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// fmtBytes prints a size in MiB (KiB below one MiB).
func fmtBytes(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// fmtPercent prints a share, with a decimal only below 100.
func fmtPercent(p float64) string {
	if p >= 100 {
		return "100 %"
	}
	return fmt.Sprintf("%.1f %%", p)
}
