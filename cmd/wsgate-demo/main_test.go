package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
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

// TestHelpNamesFlags pins that -h says what the demo is and names its
// flags (wsgate's -h named them while the demo was `wsgate demo`).
func TestHelpNamesFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-h"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, errb.String())
	}
	for _, want := range []string{"go run ./cmd/wsgate-demo", "no Redis", "-listen", "-admin", "-replicas", "-log-level"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("-h does not mention %s:\n%s", want, errb.String())
		}
	}
}

// TestBadReplicas pins the -replicas bounds: exit 2 with a message.
func TestBadReplicas(t *testing.T) {
	for _, n := range []string{"0", "17"} {
		var out, errb bytes.Buffer
		if code := run([]string{"-replicas", n}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-replicas must be 1 to 16") {
			t.Errorf("-replicas %s: exit %d, stderr %q; want 2 and the bounds", n, code, errb.String())
		}
	}
}
