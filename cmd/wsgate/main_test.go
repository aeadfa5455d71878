package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

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

// TestDemo runs the demo in process: the page is served through the
// gateway, two clients in one room see each other's messages and which
// replica served each, and a drain closes them with 1001.
func TestDemo(t *testing.T) {
	o := demoOptions{listen: freeAddr(t), admin: freeAddr(t), replicas: 2}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- demo(ctx, o, &out, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + o.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + o.listen + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(page, []byte("/room/")) {
		t.Fatalf("demo page: %d %.200s", resp.StatusCode, page)
	}

	var conns []*websocket.Conn
	replicas := map[string]bool{}
	for range 2 {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+o.listen+"/room/demo?hello=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var h struct{ Replica string }
		if err := c.ReadJSON(&h); err != nil {
			t.Fatal(err)
		}
		replicas[h.Replica] = true
		conns = append(conns, c)
	}
	if len(replicas) != 2 {
		t.Fatalf("two clients landed on %v, want both replicas", replicas)
	}
	if err := conns[0].WriteMessage(websocket.TextMessage, []byte(`{"text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conns[1].ReadMessage(); err != nil || string(msg) != `{"text":"hi"}` {
		t.Fatalf("second tab got %q, %v", msg, err)
	}
	cancel()
	for _, c := range conns {
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1001) {
			t.Errorf("want close 1001 on drain, got %v", err)
		}
		c.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "http://"+o.listen+"/") {
		t.Fatalf("demo did not print its URL:\n%s", out.String())
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
