package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The table's value columns, in order: the relay measured directly, then
// the proxies in front of both relays: wsgate with its defaults (one poller
// per core), wsgate held to one core as the peers are, wsgate reaching the
// relays over HTTP/2 (pools.protocol = "h2"), nginx and HAProxy.
const (
	colDirect = iota
	colWSGate
	colWSGate1
	colWSGateH2
	colNginx
	colHAProxy
	numCols
)

// colNames are the targets' names (log files, progress lines) and
// colHeaders the table's column headers, indexed by column.
var (
	colNames   = [numCols]string{"direct", "wsgate", "wsgate-1core", "wsgate-h2", "nginx", "haproxy"}
	colHeaders = [numCols]string{"direct to relay", "wsgate", "wsgate, 1 core", "wsgate h2", "nginx", "HAProxy"}
)

// row is one line of the report: one figure per column, NaN where it was
// not measured (no baseline, a peer not installed).
type row struct {
	figure string
	vals   [numCols]float64
	texts  [numCols]string // shown instead of vals[i] when set
	format string          // fmt verb for the values, e.g. "%.0f"
	note   string
}

func (r row) cell(i int) string {
	if r.texts[i] != "" {
		return r.texts[i]
	}
	if math.IsNaN(r.vals[i]) {
		return "n/a"
	}
	return fmt.Sprintf(r.format, r.vals[i])
}

// nanRow is a row with every value NaN, to be filled in.
func nanRow(figure, format, note string) row {
	r := row{figure: figure, format: format, note: note}
	for i := range r.vals {
		r.vals[i] = math.NaN()
	}
	return r
}

// writeTable prints rows as one Markdown table, ready for docs/benchmarks.md.
func writeTable(w io.Writer, rows []row) error {
	var b strings.Builder
	b.WriteString("| figure | " + strings.Join(colHeaders[:], " | ") + " | how |\n")
	b.WriteString("| --- |" + strings.Repeat(" ---: |", numCols) + " --- |\n")
	for _, r := range rows {
		cells := make([]string, numCols)
		for i := range cells {
			cells[i] = r.cell(i)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.figure, strings.Join(cells, " | "), r.note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
