package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
)

func TestMedian(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"odd", []float64{3, 1, 2}, 2},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"one", []float64{7}, 7},
		{"nan ignored", []float64{nan, 5, 1, 3}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := loadproc.Median(tc.in); got != tc.want {
				t.Fatalf("loadproc.Median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		if got := loadproc.Median(nil); !math.IsNaN(got) {
			t.Fatalf("loadproc.Median(nil) = %v, want NaN", got)
		}
	})
	t.Run("input untouched", func(t *testing.T) {
		in := []float64{3, 1, 2}
		loadproc.Median(in)
		if in[0] != 3 || in[1] != 1 {
			t.Fatalf("median sorted its input: %v", in)
		}
	})
}

func TestWriteTable(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		r    row
		want string
	}{
		{"values", row{figure: "f", vals: [numCols]float64{2, 3, 3.5, 3.75, 4, 5}, format: "%.1f", note: "n"}, "| f | 2.0 | 3.0 | 3.5 | 3.8 | 4.0 | 5.0 | n |"},
		{"not measured", row{figure: "f", vals: [numCols]float64{nan, 3, nan, nan, nan, 5}, format: "%.0f"}, "| f | n/a | 3 | n/a | n/a | n/a | 5 |  |"},
		{"text", row{figure: "f", vals: [numCols]float64{nan, nan, nan, nan, nan, nan}, texts: [numCols]string{1: "5 / 5"}}, "| f | n/a | 5 / 5 | n/a | n/a | n/a | n/a |  |"},
		{"nanRow", nanRow("f", "%.0f", "n"), "| f | n/a | n/a | n/a | n/a | n/a | n/a | n |"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeTable(&b, []row{tc.r}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			if len(lines) != 3 || lines[2] != tc.want {
				t.Fatalf("table:\n%s\nwant last line %q", b.String(), tc.want)
			}
			if lines[0] != "| figure | direct to relay | wsgate | wsgate, 1 core | wsgate h2 | nginx | HAProxy | how |" || strings.Count(lines[1], "|") != numCols+3 {
				t.Fatalf("header:\n%s", b.String())
			}
		})
	}
}

// TestRotation pins the interleaving: over as many repetitions as there
// are targets, each target runs once at each position.
func TestRotation(t *testing.T) {
	ts := []*target{{col: colDirect}, {col: colWSGate}, {col: colWSGate1}, {col: colWSGateH2}, {col: colNginx}, {col: colHAProxy}}
	names := func(ts []*target) string {
		s := make([]string, len(ts))
		for i, x := range ts {
			s[i] = x.name()
		}
		return strings.Join(s, ",")
	}
	want := []string{
		"direct,wsgate,wsgate-1core,wsgate-h2,nginx,haproxy",
		"wsgate,wsgate-1core,wsgate-h2,nginx,haproxy,direct",
		"wsgate-1core,wsgate-h2,nginx,haproxy,direct,wsgate",
		"wsgate-h2,nginx,haproxy,direct,wsgate,wsgate-1core",
		"nginx,haproxy,direct,wsgate,wsgate-1core,wsgate-h2",
		"haproxy,direct,wsgate,wsgate-1core,wsgate-h2,nginx",
	}
	for i, w := range want {
		if got := names(rotation(ts, i)); got != w {
			t.Errorf("rotation %d = %s, want %s", i, got, w)
		}
	}
	if got := names(rotation(ts[:2], 1)); got != "wsgate,direct" {
		t.Errorf("rotation of two = %s", got)
	}
}

func TestPlanRates(t *testing.T) {
	for _, p := range []plan{fullPlan, quickPlan} {
		for _, fps := range append([]float64{p.fanFPS, p.fanLightFPS}, p.ladder...) {
			if got := p.framesPerSec(p.memberRate(fps)); math.Abs(got-fps) > 1e-6 {
				t.Errorf("framesPerSec(memberRate(%v)) = %v", fps, got)
			}
		}
		if !slices.IsSorted(p.ladder) || len(p.ladder) == 0 || p.ladder[0] <= p.fanFPS {
			t.Errorf("ladder %v must rise from above the fixed rate %v", p.ladder, p.fanFPS)
		}
	}
	// 50 rooms × 10 members at 2.4 msg/s each: 1,200 sent and 10,800
	// received per second.
	if got := fullPlan.memberRate(12000); got != 2.4 {
		t.Errorf("memberRate(12000) = %v, want 2.4", got)
	}
	if modeName(fullPlan) != "full" || modeName(quickPlan) != "BENCH_QUICK=1" {
		t.Error("modeName")
	}
}

func TestLadderText(t *testing.T) {
	tests := []struct {
		l    ladderResult
		want string
	}{
		{ladderResult{held: 30000, failed: 40000, p99: 12.34}, "30000 (p99 12.3)"},
		{ladderResult{held: 70000, p99: 40}, "≥ 70000 (p99 40.0)"},
		{ladderResult{failed: 20000}, "< 20000"},
	}
	for _, tc := range tests {
		if got := ladderText(tc.l); got != tc.want {
			t.Errorf("ladderText(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}

func TestCodesAndSplitText(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"codes sorted", codesText(map[string]int64{"1012": 2, "1001": 50}), "1001×50, 1012×2"},
		{"no codes", codesText(nil), "none"},
		{"split", splitText([]int{4500, 4500}), "4500 / 4500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestRunFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"unknown flag", []string{"-nope"}, 2},
		{"too many relays", []string{"-up", "-relays", "17"}, 2},
		{"no gateways", []string{"-up", "-gateways", "0"}, 2},
		{"gateway-env without =", []string{"-up", "-gateway-env", "GODEBUG"}, 2},
		{"gateway-env without a key", []string{"-up", "-gateway-env", "=1"}, 2},
		{"gateway-env without -up", []string{"-gateway-env", "GOGC=200"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb strings.Builder
			if got := run(t.Context(), tc.args, &out, &errb); got != tc.want {
				t.Fatalf("run(%q) = %d, want %d (%s)", tc.args, got, tc.want, errb.String())
			}
		})
	}
}
