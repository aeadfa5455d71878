package main

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/bench/loadgen"
)

// steady returns samples every 100 ms over d of a process using pct
// percent of a core, from the kill on.
func steady(d time.Duration, pct float64) []cpuSample {
	var s []cpuSample
	for at := time.Duration(0); at <= d; at += 100 * time.Millisecond {
		s = append(s, cpuSample{at: at, cpu: time.Duration(float64(at) * pct / 100)})
	}
	return s
}

// late returns samples at the given milliseconds of a process using pct
// percent of a core.
func late(pct float64, at ...int) []cpuSample {
	s := make([]cpuSample, len(at))
	for i, a := range at {
		d := time.Duration(a) * time.Millisecond
		s[i] = cpuSample{at: d, cpu: time.Duration(float64(d) * pct / 100)}
	}
	return s
}

func TestStormCPU(t *testing.T) {
	ms := time.Millisecond
	// burst: idle, then 100% of a core from 1 s to 1.5 s, idle again.
	var burst []cpuSample
	for at := time.Duration(0); at <= 3*time.Second; at += 100 * ms {
		c := min(max(at-time.Second, 0), 500*ms)
		burst = append(burst, cpuSample{at: at, cpu: c})
	}
	tests := []struct {
		name      string
		samples   []cpuSample
		end       time.Duration
		peak      float64 // NaN: none
		total     time.Duration
		tolerance float64
	}{
		{"steady half a core", steady(5*time.Second, 50), 3 * time.Second, 50, 1500 * ms, 0.01},
		// Ended before a second: the peak's windows still span one.
		{"short storm", steady(5*time.Second, 80), 400 * ms, 80, 320 * ms, 0.01},
		// The burst's 0.5 s in one second's window: 50%.
		{"burst", burst, 2500 * ms, 50, 500 * ms, 0.01},
		// After the end: not counted, in neither figure.
		{"burst after the end", burst, 500 * ms, 0, 0, 0.01},
		// The end past the last sample: up to the last one.
		{"end past the samples", steady(2*time.Second, 25), 10 * time.Second, 25, 500 * ms, 0.01},
		{"too short for a window", steady(500*ms, 90), 300 * ms, math.NaN(), 270 * ms, 0.01},
		{"no samples", nil, time.Second, math.NaN(), 0, 0},
		// Samples 127-146 ms apart under load, as once measured: no two
		// are 0.9-1 s apart up to the end, and each window is the
		// shortest of at least a second.
		{"late samples", late(50, 0, 139, 285, 426, 568, 714, 864, 1011, 1159, 1300), 1066 * ms, 50, 579500 * time.Microsecond, 0.01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peak, total := stormCPU(tc.samples, tc.end)
			if math.IsNaN(tc.peak) != math.IsNaN(peak) || (!math.IsNaN(peak) && math.Abs(peak-tc.peak) > tc.tolerance) {
				t.Errorf("peak = %v, want %v", peak, tc.peak)
			}
			if d := total - tc.total; d > time.Millisecond || d < -time.Millisecond {
				t.Errorf("total = %v, want %v", total, tc.total)
			}
		})
	}
}

func TestStormRuns(t *testing.T) {
	var live []*target
	for col := range numCols {
		if col != colNginx { // nginx not installed
			live = append(live, &target{col: col})
		}
	}
	runs, adm := stormRuns(live)
	var cols []int
	for _, t := range runs {
		cols = append(cols, t.col)
	}
	if want := []int{colWSGate, colWSGate1, colHAProxy}; !slices.Equal(cols, want) {
		t.Errorf("storm runs through columns %v, want %v (HTTP/1.1 proxies that run)", cols, want)
	}
	if adm == nil || adm.col != colWSGate {
		t.Errorf("admission run through %v, want the gateway with its defaults", adm)
	}
}

func TestStormRows(t *testing.T) {
	var res [numCols]results
	res[colWSGate].storm = &stormResult{back: 2000, lastBack: 1234 * time.Millisecond, peak: 41.6, cpu: 1500 * time.Millisecond,
		codes: loadgen.Counts{"1012": 2000}}
	res[colNginx].storm = &stormResult{back: 1990, notBack: 10, lost: 3, peak: 55, cpu: 2 * time.Second, codes: loadgen.Counts{"1006": 2000}}
	res[colHAProxy].stormErr = errors.New("boom")
	adm := &stormResult{back: 2000, lastBack: 8875 * time.Millisecond, peak: 30.4, cpu: 2100 * time.Millisecond}
	rows := stormRows(&res, adm, nil, fullPlan)
	want := []string{
		"| storm: last client back after a relay is killed (s) | n/a | 1.23 | n/a | n/a | 10 not back | failed |",
		"| storm: clients back / not back | n/a | 2000 / 0 | n/a | n/a | 1990 / 10 | failed |",
		"| storm: lost writes | n/a | 0 | n/a | n/a | 3 | failed |",
		"| storm: proxy peak CPU (% of a core, 1 s) | n/a | 42 | n/a | n/a | 55 | failed |",
		"| storm: proxy CPU-s over the storm | n/a | 1.50 | n/a | n/a | 2.00 | failed |",
		"| storm with admission: last client back (s); back / not back; lost writes; peak CPU (%); CPU-s | n/a | 8.88; 2000 / 0; 0; 30; 2.10 | n/a | n/a | n/a | n/a |",
	}
	var b strings.Builder
	if err := writeTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")[2:]
	if len(lines) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("row %d:\n%s\nwant it to start with\n%s", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[0], "4000 clients") || !strings.Contains(lines[1], "wsgate 1012×2000; nginx 1006×2000") ||
		!strings.Contains(lines[5], "rate = 250, burst = 250") {
		t.Errorf("the notes lack the clients, the close codes or the admission:\n%s", b.String())
	}
	// The run with admission failed: its cell says so.
	rows = stormRows(&res, nil, errors.New("boom"), quickPlan)
	if got := rows[5].cell(colWSGate); got != "failed" {
		t.Errorf("failed admission run's cell = %q", got)
	}
	if !strings.Contains(rows[0].note, "1000 clients") {
		t.Errorf("quick storm's note: %s", rows[0].note)
	}
}
