package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
)

// writeTable prints a Markdown row per case: medians over its runs of the
// largest and median deviation, the worst sample of all runs and whether
// the ±10% held in every run.
func writeTable(w io.Writer, res [][]spread) {
	var b strings.Builder
	b.WriteString("| case | gateway 1 source | gateway 2 source | connections counted (min-max) | max deviation, median of runs | median deviation, median of runs | worst sample (split) | within ±10% |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | --- | --- |\n")
	for i, sc := range scenarios {
		var maxs, meds []float64
		var worst spread
		lo, hi, held := -1, 0, 0
		for _, s := range res[i] {
			maxs, meds = append(maxs, s.maxDev), append(meds, s.medDev)
			if s.maxDev >= worst.maxDev {
				worst = s
			}
			if lo < 0 || s.lo < lo {
				lo = s.lo
			}
			hi = max(hi, s.hi)
			if s.maxDev <= 0.10 {
				held++
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d-%d | %.1f%% | %.1f%% | %.1f%% %v | %d of %d runs |\n",
			sc.name, sc.a.desc, sc.b.desc, lo, hi, 100*loadproc.Median(maxs), 100*loadproc.Median(meds),
			100*worst.maxDev, worst.worst, held, len(res[i]))
	}
	_, _ = io.WriteString(w, b.String())
}
