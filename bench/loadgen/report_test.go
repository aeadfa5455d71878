package loadgen

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// childReport is what a -procs child prints: counters and raw histograms.
func childReport(t *testing.T, connected int64, lat []time.Duration, failed map[string]int64) *Report {
	t.Helper()
	r := NewReport("fanout")
	r.Connected, r.Attempts = connected, connected
	r.Sent, r.Expected, r.Received = 100, 200, 199
	for k, v := range failed {
		r.FailedBy[k] = v
	}
	for _, d := range lat {
		r.Latency.Hist.Record(d)
	}
	r.Finalize()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

func TestReportMerge(t *testing.T) {
	a := childReport(t, 10, []time.Duration{time.Millisecond, 2 * time.Millisecond}, map[string]int64{"http_503": 2})
	b := childReport(t, 5, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}, map[string]int64{"http_503": 1, "dial": 4})
	a.Target, a.Short, b.Target, b.Short = 12, 2, 6, 1
	m := NewReport("fanout")
	m.Merge(a)
	m.Merge(b)
	m.Finalize()
	tests := []struct {
		name      string
		got, want float64
	}{
		{"connected", float64(m.Connected), 15},
		{"target", float64(m.Target), 18},
		{"short", float64(m.Short), 3},
		{"failed", float64(m.Failed), 7},
		{"http_503", float64(m.FailedBy["http_503"]), 3},
		{"latency count", float64(m.Latency.Count), 4},
		{"latency max", m.Latency.Max, 20},
		{"headline max", m.Max, 20},
		{"delivered", m.Delivered, 99.5},
		{"sent", float64(m.Sent), 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
			}
		})
	}
	// The p50 of the merged distribution is ~2ms or ~10ms, never an
	// average of the children's p50s (1.5ms and 15ms).
	if p := m.Latency.P50; p < 1.9 || p > 2.1 {
		t.Errorf("merged p50 = %v, want ~2", p)
	}
}

func TestReportMetricsAndTable(t *testing.T) {
	r := NewReport("idle")
	r.Connected = 3
	r.DroppedBy["1006"] = 1
	r.Connect.Hist.Record(5 * time.Millisecond)
	r.Finalize()
	m := r.Metrics()
	for k, want := range map[string]float64{"connected": 3, "dropped": 1, "dropped_by.1006": 1, "connect_ms.p95": 5, "p95": 5, "passed": 1} {
		if m[k] != want {
			t.Errorf("metric %s = %v, want %v", k, m[k], want)
		}
	}
	for k := range m {
		if strings.Contains(k, "hist") {
			t.Errorf("metric %s exposes the raw histogram", k)
		}
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"wsload idle", "connected", "dropped_by.1006", "connect_ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestConfigSplit(t *testing.T) {
	c := Config{Scenario: "fanout", URL: "ws://127.0.0.1:1/room/r%d", Rooms: 10, N: 7, KillCmd: "true"}
	rooms, base := 0, -1
	for i := range 3 {
		s := c.Split(i, 3)
		if s.RoomBase <= base && s.Rooms > 0 {
			t.Errorf("child %d room base %d not after %d", i, s.RoomBase, base)
		}
		base = s.RoomBase
		rooms += s.Rooms
		if (s.KillCmd != "") != (i == 0) {
			t.Errorf("child %d kill command %q", i, s.KillCmd)
		}
	}
	if rooms != 10 {
		t.Errorf("rooms split into %d, want 10", rooms)
	}
}

// TestConfigSplitValidates: every child of a kill or drain run is a valid
// configuration, though only the first one acts.
func TestConfigSplitValidates(t *testing.T) {
	for _, scenario := range []string{"kill", "drain"} {
		c := Config{Scenario: scenario, URL: "ws://127.0.0.1:1/room/r%d", Rooms: 6, Members: 2, N: 12, DrainURL: "http://127.0.0.1:1/drain", Signal: "TERM"}
		for i := range 3 {
			if err := c.Split(i, 3).Validate(); err != nil {
				t.Errorf("%s child %d: %v", scenario, i, err)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		ok   bool
	}{
		{"idle", Config{Scenario: "idle", URL: "ws://127.0.0.1:1/room/x"}, true},
		{"unknown", Config{Scenario: "soak", URL: "ws://127.0.0.1:1/"}, false},
		{"wss", Config{Scenario: "idle", URL: "wss://127.0.0.1:1/"}, true},
		{"https", Config{Scenario: "idle", URL: "https://127.0.0.1:1/"}, false},
		{"churn without room", Config{Scenario: "churn", URL: "ws://127.0.0.1:1/room/x"}, false},
		{"fanout one room", Config{Scenario: "fanout", URL: "ws://127.0.0.1:1/room/x", Rooms: 1}, true},
		{"fanout one member", Config{Scenario: "fanout", URL: "ws://127.0.0.1:1/room/r%d", Members: 1}, false},
		{"kill without action", Config{Scenario: "kill", URL: "ws://127.0.0.1:1/room/r%d"}, false},
		{"drain url", Config{Scenario: "drain", URL: "ws://127.0.0.1:1/room/r%d", DrainURL: "http://127.0.0.1:2/"}, true},
		{"bad signal", Config{Scenario: "kill", URL: "ws://127.0.0.1:1/room/r%d", KillPID: 1, Signal: "NOPE"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
