package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
)

// writeTable prints one Markdown row per figure and a column per policy,
// each cell the median over that policy's runs.
func writeTable(w io.Writer, pols []policy, res [][]result) {
	med := func(i int, f func(result) float64) float64 {
		xs := make([]float64, len(res[i]))
		for k, r := range res[i] {
			xs[k] = f(r)
		}
		return loadproc.Median(xs)
	}
	rows := []struct {
		figure, format string
		f              func(result) float64
	}{
		{"frames delivered to members", "%.0f", func(r result) float64 { return r.received }},
		{"delivered (% of expected)", "%.2f", func(r result) float64 { return r.delivered }},
		{"Redis PUBLISH calls (cmdstat_publish)", "%.0f", func(r result) float64 { return r.publish }},
		{"Redis commands (total_commands_processed)", "%.0f", func(r result) float64 { return r.commands }},
		{"relays subscribed per room, mean (PUBSUB NUMSUB)", "%.2f", func(r result) float64 { return r.subsMean }},
		{"relays subscribed per room, max", "%.0f", func(r result) float64 { return r.subsMax }},
		{"rooms on one relay only", "%.0f", func(r result) float64 { return r.single }},
		{"pub/sub deliveries to relays (PUBLISH x mean subscribed)", "%.0f", func(r result) float64 { return r.publish * r.subsMean }},
		{"Redis output (MB, total_net_output_bytes)", "%.1f", func(r result) float64 { return r.netOut / 1e6 }},
		{"Redis CPU (s)", "%.2f", func(r result) float64 { return r.redisCPU.Seconds() }},
		{"relay CPU, all relays (s)", "%.2f", func(r result) float64 { return r.relayCPU.Seconds() }},
		{"relay CPU per million delivered frames (s)", "%.2f", func(r result) float64 { return r.relayCPU.Seconds() / r.received * 1e6 }},
	}
	names := make([]string, len(pols))
	for i, p := range pols {
		names[i] = p.name
	}
	var b strings.Builder
	b.WriteString("| figure | " + strings.Join(names, " | ") + " |\n")
	b.WriteString("| --- |" + strings.Repeat(" ---: |", len(pols)) + "\n")
	for _, row := range rows {
		cells := make([]string, len(pols))
		for i := range pols {
			cells[i] = fmt.Sprintf(row.format, med(i, row.f))
		}
		fmt.Fprintf(&b, "| %s | %s |\n", row.figure, strings.Join(cells, " | "))
	}
	b.WriteString("\nconnections per relay while all were connected, each run: ")
	for i, p := range pols {
		fmt.Fprintf(&b, "%s", p.name)
		for _, r := range res[i] {
			fmt.Fprintf(&b, " %v", r.split)
		}
		if i < len(pols)-1 {
			b.WriteString("; ")
		}
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}
