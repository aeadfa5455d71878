package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
)

// writeTable prints a Markdown row per case: medians over its runs of the
// largest and median deviation, the worst sample of all runs, how many
// samples of all runs were beyond ±10%, and in how many runs every sample
// was within it.
func writeTable(w io.Writer, res [][]spread) {
	var b strings.Builder
	b.WriteString("| case | gateway 1 source | gateway 2 source | connections counted (min-max) | max deviation, median of runs | median deviation, median of runs | worst sample (split) | samples beyond ±10% | runs within ±10% |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |\n")
	for i, sc := range scenarios {
		var maxs, meds []float64
		var worst spread
		lo, hi, held, beyond, counted := -1, 0, 0, 0, 0
		for _, s := range res[i] {
			maxs, meds = append(maxs, s.maxDev), append(meds, s.medDev)
			if s.maxDev >= worst.maxDev {
				worst = s
			}
			if lo < 0 || s.lo < lo {
				lo = s.lo
			}
			hi = max(hi, s.hi)
			beyond, counted = beyond+s.beyond, counted+s.samples
			if s.maxDev <= 0.10 {
				held++
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d-%d | %.1f%% | %.1f%% | %.1f%% %v | %d of %d | %d of %d |\n",
			sc.name, sc.a.desc, sc.b.desc, lo, hi, 100*loadproc.Median(maxs), 100*loadproc.Median(meds),
			100*worst.maxDev, worst.worst, beyond, counted, held, len(res[i]))
	}
	_, _ = io.WriteString(w, b.String())
}
