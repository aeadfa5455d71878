package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestEditThenSIGHUPLogsWhatChanged runs the README's reload as written:
// the config file edited (renamed over, as editors save), then `kill
// -HUP`, with the file watched (the default). That reloads twice, the
// watcher's and the signal's; the log used to say "config reloaded" twice
// with no more than a generation. Now each line names its trigger, the
// first the node it added and the settings it changed, and the second
// says it changed nothing.
func TestEditThenSIGHUPLogsWhatChanged(t *testing.T) {
	dir := t.TempDir()
	admin, gw := testproc.FreeAddr(t), testproc.FreeAddr(t)
	cfg := filepath.Join(dir, "wsgate.toml")
	text := fmt.Sprintf(`
[gateway]
listen = %q
[admin]
listen = %q
[log]
format = "json"
[[pools]]
name = "relay"
max_conns_per_node = 100
  [[pools.nodes]]
  addr = "127.0.0.1:1"
[[routes]]
pool = "relay"
`, gw, admin)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg)
	testproc.WaitHTTP(t, "http://"+admin+"/healthz", http.StatusOK, 30*time.Second)

	edited := strings.Replace(strings.Replace(text, "max_conns_per_node = 100", "max_conns_per_node = 50", 1),
		"[[routes]]", "  [[pools.nodes]]\n  addr = \"127.0.0.1:2\"\n[[routes]]", 1)
	if err := os.WriteFile(cfg+".new", []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfg+".new", cfg); err != nil {
		t.Fatal(err)
	}
	// A person's kill -HUP comes well after the watcher saw the rename;
	// the test waits for the watcher's reload before signalling, so that
	// a SIGHUP landing first (which loads the edit itself and leaves the
	// watcher nothing new) does not make it a test of who is faster.
	reloadLines(t, p, 1)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	lines := reloadLines(t, p, 2)
	if lines[0]["trigger"] != "file" || lines[1]["trigger"] != "signal" {
		t.Errorf("triggers %v and %v, want file then signal", lines[0]["trigger"], lines[1]["trigger"])
	}
	// The kept node's cap is the pool's default: it changed with it.
	const want = "changed pools[relay].max_conns_per_node; changed pools[relay].nodes[127.0.0.1:1].max_conns; added pools[relay].nodes[127.0.0.1:2]"
	if lines[0]["changes"] != want {
		t.Errorf("first reload's changes %q, want %q", lines[0]["changes"], want)
	}
	if lines[1]["changes"] != "none" {
		t.Errorf("second reload's changes %q, want \"none\"", lines[1]["changes"])
	}
}

// reloadLines waits, up to 30 s, until p has logged n "config reloaded"
// lines, and returns them in order.
func reloadLines(t *testing.T, p *testproc.Proc, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var lines []map[string]any
		for _, l := range strings.Split(p.Output(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "config reloaded" {
				lines = append(lines, m)
			}
		}
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d \"config reloaded\" lines within 30s, want %d", len(lines), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
