package main

import (
	"math"
	"strings"
	"testing"
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
			if got := median(tc.in); got != tc.want {
				t.Fatalf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		if got := median(nil); !math.IsNaN(got) {
			t.Fatalf("median(nil) = %v, want NaN", got)
		}
	})
	t.Run("input untouched", func(t *testing.T) {
		in := []float64{3, 1, 2}
		median(in)
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
		{"ratio", row{figure: "f", direct: 2, through: 3, format: "%.1f", note: "n"}, "| f | 2.0 | 3.0 | 1.50 | n |"},
		{"no baseline", row{figure: "f", direct: nan, through: 3, format: "%.0f"}, "| f | n/a | 3 | n/a |  |"},
		{"zero baseline", row{figure: "f", direct: 0, through: 3, format: "%.0f"}, "| f | 0 | 3 | n/a |  |"},
		{"text", row{figure: "f", direct: nan, through: nan, text: "5 / 5"}, "| f | n/a | 5 / 5 | n/a |  |"},
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
		})
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
