package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// row is one line of the report: a figure measured directly against a relay
// (NaN when there is no direct baseline) and through the gateway.
type row struct {
	figure  string
	direct  float64
	through float64
	format  string // fmt verb for both values, e.g. "%.0f"
	text    string // shown instead of through when set (a split, a count)
	note    string
}

// ratio is through/direct, NaN without a baseline.
func (r row) ratio() float64 {
	if math.IsNaN(r.direct) || math.IsNaN(r.through) || r.direct == 0 {
		return math.NaN()
	}
	return r.through / r.direct
}

func (r row) cell(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf(r.format, v)
}

// writeTable prints rows as one Markdown table, ready for docs/benchmarks.md.
func writeTable(w io.Writer, rows []row) error {
	var b strings.Builder
	b.WriteString("| figure | direct to relay | through wsgate | ratio | how |\n")
	b.WriteString("| --- | ---: | ---: | ---: | --- |\n")
	for _, r := range rows {
		ratio := "n/a"
		if x := r.ratio(); !math.IsNaN(x) {
			ratio = fmt.Sprintf("%.2f", x)
		}
		through := r.cell(r.through)
		if r.text != "" {
			through = r.text
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.figure, r.cell(r.direct), through, ratio, r.note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// median is the middle value of xs (the mean of the two middle ones for an
// even count), NaN for none. NaN values are ignored.
func median(xs []float64) float64 {
	s := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
