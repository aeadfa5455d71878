package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestCheckShippedConfig(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-check", "-config", "../../conf/wsgate.toml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ok") {
		t.Fatalf("stdout %q", out.String())
	}
}

func TestCheckBadConfigNamesFileLineKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.toml")
	cfg := "[gateway]\nlisten = \":8080\"\n\n[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n  max_conns = -5\n\n[[routes]]\npool = \"relay\"\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-check", "-config", path}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	msg := errb.String()
	for _, want := range []string{path + ":8:", "pools[0].nodes[0].max_conns"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// TestLoggerConfigFormatAndPid pins the log [log] format builds: "json"
// writes one JSON object a line, "text" key=value, and every line of
// either carries the process id, so the two processes of a SIGUSR2
// restart writing to one stream can be told apart.
func TestLoggerConfigFormatAndPid(t *testing.T) {
	var jb, tb bytes.Buffer
	newLogger(&jb, slog.LevelInfo, "json").Info("hello", "k", "v")
	var m map[string]any
	if err := json.Unmarshal(jb.Bytes(), &m); err != nil {
		t.Fatalf("json log line: %v: %s", err, jb.String())
	}
	if m["pid"] != float64(os.Getpid()) || m["msg"] != "hello" {
		t.Errorf("json log line %v, want pid %d and msg hello", m, os.Getpid())
	}
	newLogger(&tb, slog.LevelInfo, "text").Info("hello")
	if want := "pid=" + strconv.Itoa(os.Getpid()); !strings.Contains(tb.String(), want) || strings.HasPrefix(tb.String(), "{") {
		t.Errorf("text log line %q, want key=value with %s", tb.String(), want)
	}
}
