package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/rlimit"
	"github.com/wsgate/wsgate/internal/testproc"
)

// logRecords returns buf's JSON records whose msg is msg, each with the
// keys its raw line repeats (JSON decoders keep the last of those).
func logRecords(t *testing.T, buf *testproc.Buffer, msg string) (recs []map[string]any, dups [][]string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		if m["msg"] != msg {
			continue
		}
		recs = append(recs, m)
		dups = append(dups, repeatedKeys(t, l))
	}
	return recs, dups
}

// repeatedKeys returns the top-level keys a JSON object line has more
// than once.
func repeatedKeys(t *testing.T, line string) []string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(line))
	if _, err := d.Token(); err != nil { // {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		if seen[k.(string)] {
			out = append(out, k.(string))
		}
		seen[k.(string)] = true
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestStartLogNamesEveryListener pins issue 19 item 16: the start-up log
// did not say that the TLS listener was up, nor where. Each listener,
// plain, TLS and admin, now has a line with its address.
func TestStartLogNamesEveryListener(t *testing.T) {
	var buf testproc.Buffer
	f := newTLSFiles(t)
	cfg := strings.Replace(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll), "[admin]\nlisten = \"\"", "[admin]\nlisten = \"127.0.0.1:0\"", 1)
	e := newEnvLog(t, 1, cfg, jsonLog(&buf))
	recs, _ := logRecords(t, &buf, "listening")
	want := map[string]string{
		"plain": e.srv.Addr().String(),
		"tls":   e.srv.TLSAddr().String(),
		"admin": e.srv.AdminAddr().String(),
	}
	got := map[string]string{}
	for _, r := range recs {
		got[r["listener"].(string)] = r["addr"].(string)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("listener %s logged at %q, want %q (lines %v)", k, got[k], v, recs)
		}
	}
}

// TestPluginLogLines pins two defects of issue 19 item 16: "auth plugin
// started" carried pid twice, the gateway's and the plugin's (a JSON
// reader keeps the last: the gateway's was lost), and a plugin's own line
// (the apikey plugin's log.Printf) came with the plugin's timestamp
// inside the gateway's record.
func TestPluginLogLines(t *testing.T) {
	var buf testproc.Buffer
	e := newAuthEnvLog(t, "", jsonLog(&buf), false)
	recs, dups := logRecords(t, &buf, "auth plugin started")
	if len(recs) != 2 {
		t.Fatalf("%d plugin start lines, want 2", len(recs))
	}
	for i, r := range recs {
		if len(dups[i]) > 0 {
			t.Errorf("%v: keys %v repeated", r, dups[i])
		}
		if r["pid"] != float64(os.Getpid()) || r["plugin_pid"] == nil || r["plugin_pid"] == r["pid"] {
			t.Errorf("%v: want the gateway's pid %d and the plugin's in plugin_pid", r, os.Getpid())
		}
	}

	tmp := e.keys + ".new"
	if err := os.WriteFile(tmp, []byte("k1 alice\nk2 bob\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.keys); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _ := logRecords(t, &buf, "keys file reloaded: 2 keys")
		if len(recs) > 0 {
			if recs[0]["plugin"] != "apikey" {
				t.Fatalf("relayed line %v, want plugin=apikey", recs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no relayed line \"keys file reloaded: 2 keys\" within 10s; log:\n%s", buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStartLogMaxConnsWarnsOnlyWhenSet pins a line that cried wolf: every
// start warned that max_conns was held to what the open-file limit
// carries, although the operator had left max_conns at its default (a
// million, meaning "as many as the machine carries"). That is now an INFO
// line; the WARN stays for a max_conns the file set and the limit cut.
func TestStartLogMaxConnsWarnsOnlyWhenSet(t *testing.T) {
	soft, _, err := rlimit.NoFile()
	if err != nil {
		t.Fatal(err)
	}
	ceiling := rlimit.MaxConns(soft)
	if ceiling >= 1_000_000 {
		t.Skipf("the open-file limit (%d) carries the default max_conns: no cut to log", soft)
	}
	for _, tc := range []struct {
		name, gateway, level string
	}{
		{"default", "", "INFO"},
		{"set and cut", "max_conns = 1_000_000", "WARN"},
		{"set and kept", fmt.Sprintf("max_conns = %d", ceiling-1), "INFO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf testproc.Buffer
			newEnvLog(t, 1, oneNodeWith(tc.gateway, "", ""), jsonLog(&buf))
			var lines []map[string]any
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("log line is not JSON: %v: %s", err, l)
				}
				if _, ok := m["max_conns"]; ok && m["file_ceiling"] != nil {
					lines = append(lines, m)
				}
			}
			if len(lines) != 1 {
				t.Fatalf("%d connection-limit lines, want 1; log:\n%s", len(lines), buf.String())
			}
			if l := lines[0]; l["level"] != tc.level {
				t.Errorf("line %v: level %v, want %s", l, l["level"], tc.level)
			}
			if tc.name == "default" && lines[0]["configured"] != "default (1000000)" {
				t.Errorf("line %v: configured = %v, want \"default (1000000)\"", lines[0], lines[0]["configured"])
			}
		})
	}
}
