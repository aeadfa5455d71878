package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseFlags checks the defaults and that out-of-range values and
// unknown attacks are refused before anything starts.
func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.attacks, allAttacks) || o.reps != 3 || o.victims != 20 || !o.reconnect || o.attacker.String() != "127.0.0.2" {
		t.Fatalf("defaults: %+v", o)
	}
	o, err = parseFlags([]string{"-attacks", "19, 14", "-reps", "1", "-flood-rate", "-1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.attacks, []string{"14", "19"}) || o.floodRate != -1 {
		t.Fatalf("-attacks 19,14 -flood-rate -1: %v %v", o.attacks, o.floodRate)
	}
	for _, bad := range [][]string{
		{"-attacks", "13"},
		{"-attacks", "14,14"},
		{"-attacks", ""},
		{"-reps", "0"},
		{"-duration", "1h"},
		{"-victims", "0"},
		{"-flood-rate", "-2"},
		{"-attacker", "10.0.0.1"},
		{"-attacker", "::1"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		if _, err := parseFlags(bad, &stderr); err == nil {
			t.Errorf("%q accepted", bad)
		} else if !strings.Contains(stderr.String(), "Usage") {
			t.Errorf("%q: no usage in %q", bad, stderr.String())
		}
	}
}

// TestTable checks that the runs of an attack reduce to their medians,
// the attacker's outcome from the median run, and that the table prints
// them as one row under its header.
func TestTable(t *testing.T) {
	run := func(p99b, p99u time.Duration, ok int, got string) result {
		return result{
			attack: "17",
			base:   victimStats{p50: time.Millisecond, p99: p99b, sent: 100, ok: 100},
			under:  victimStats{p50: 2 * time.Millisecond, p99: p99u, sent: 100, ok: ok},
			cpu:    time.Second, selfCPU: time.Second / 2, wall: 2 * time.Second,
			rssBefore: 30 << 20, rssPeak: 45 << 20, logLines: 3, got: got,
		}
	}
	runs := []result{
		run(2*time.Millisecond, 3*time.Millisecond, 100, "low"),
		run(2*time.Millisecond, 300*time.Millisecond, 90, "high"),
		run(2*time.Millisecond, 5*time.Millisecond, 99, "middle"),
	}
	s := summarize(runs)
	if s.p99u != 5*time.Millisecond || s.ratio != 2.5 || s.delivered != 99 || s.cpu != 50 || s.self != 25 || s.got != "middle" {
		t.Fatalf("summary: %+v", s)
	}
	var b bytes.Buffer
	writeTable(&b, []summary{s})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header, a rule and one row:\n%s", b.String())
	}
	want := "| 17 client WINDOW_UPDATE(0,1) flood (3 conns) | 1.00 ms → 2.00 ms | 2.00 ms → 5.00 ms | 2.50 | 99.0 % | 30 MiB → 45 MiB | 50 % | 25 % | 3 | middle |"
	if lines[2] != want {
		t.Fatalf("row\n%s\nwant\n%s", lines[2], want)
	}
	if n := strings.Count(lines[0], "|"); n != strings.Count(lines[1], "|") || n != strings.Count(want, "|") {
		t.Fatalf("header, rule and row have different column counts:\n%s", b.String())
	}
	b.Reset()
	writeRuns(&b, runs)
	if strings.Count(b.String(), "\n") != 3 {
		t.Fatalf("one line a run:\n%s", b.String())
	}
}

// TestFormats checks the units the table prints.
func TestFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "-", 1234 * time.Microsecond: "1.23 ms", 45 * time.Millisecond: "45 ms", 1500 * time.Millisecond: "1.5 s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "-", 2048: "2 KiB", 5 << 20: "5 MiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := fmtPercent(100); got != "100 %" {
		t.Errorf("fmtPercent(100) = %q", got)
	}
}

// TestReaders checks the parsers of the gateway's metrics and status.
func TestReaders(t *testing.T) {
	text := []byte(`# HELP wsgate_handshakes_total x
wsgate_handshakes_total{pool="a",result="ok"} 5
wsgate_handshakes_total{pool="a",result="client_gone"} 7
wsgate_handshakes_total{pool="b",result="client_gone"} 2
wsgate_handshakes_totals{result="client_gone"} 100
`)
	if got := sumMetric(text, "wsgate_handshakes_total", `result="client_gone"`); got != 9 {
		t.Errorf("client_gone: %v, want 9", got)
	}
	if got := sumMetric(text, "wsgate_handshakes_total"); got != 14 {
		t.Errorf("all: %v, want 14", got)
	}
	hwm, err := parseVmHWM([]byte("Name:\twsgate\nVmPeak:\t 9 kB\nVmHWM:\t   46080 kB\nVmRSS:\t 1 kB\n"))
	if err != nil || hwm != 45<<20 {
		t.Errorf("VmHWM: %d, %v", hwm, err)
	}
	if _, err := parseVmHWM([]byte("VmRSS:\t 1 kB\n")); err == nil {
		t.Error("a status without VmHWM accepted")
	}
}
