package pluginhost

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestLogWriterDropsPluginTime pins issue 19 item 16: a plugin's log line
// was relayed with its own timestamp inside the gateway's record (two
// times), and an hclog JSON line as a raw string. The plugin's time is
// dropped, its level kept, an hclog line's keys become fields.
func TestLogWriterDropsPluginTime(t *testing.T) {
	var buf testproc.Buffer
	w := &logWriter{log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), plugin: "p"}
	for _, l := range []string{
		"2001/02/03 04:05:06 keys file reloaded: 3 keys",        // log.Printf
		"2001/02/03 04:05:06.123456 WARN slow decision ms=12",   // slog's default logger
		"2001-02-03T04:05:06.123Z [ERROR] go-plugin: boom: x=1", // hclog text
		`{"@level":"warn","@message":"plugin: slow","@module":"go-plugin","@timestamp":"2001-02-03T04:05:06.123456Z","pid":7}`,
		"no time here",
	} {
		w.Write([]byte(l + "\n"))
	}
	want := []struct {
		level, msg string
		fields     map[string]any
	}{
		{"INFO", "keys file reloaded: 3 keys", nil},
		{"WARN", "slow decision ms=12", nil},
		{"ERROR", "go-plugin: boom: x=1", nil},
		{"WARN", "plugin: slow", map[string]any{"module": "go-plugin", "pid": float64(7)}},
		{"INFO", "no time here", nil},
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("record %d: %v: %s", i, err, l)
		}
		if m["level"] != want[i].level || m["msg"] != want[i].msg || m["plugin"] != "p" {
			t.Errorf("record %d: level %v msg %q plugin %v, want %s %q p", i, m["level"], m["msg"], m["plugin"], want[i].level, want[i].msg)
		}
		if strings.Contains(l, "2001") {
			t.Errorf("record %d keeps the plugin's time: %s", i, l)
		}
		f, _ := m["fields"].(map[string]any)
		if len(f) != len(want[i].fields) {
			t.Errorf("record %d: fields %v, want %v", i, f, want[i].fields)
		}
		for k, v := range want[i].fields {
			if f[k] != v {
				t.Errorf("record %d: field %s = %v, want %v", i, k, f[k], v)
			}
		}
	}
}
