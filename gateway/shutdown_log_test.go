package gateway

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestDrainLogAtStart pins when Shutdown says "draining": as the drain
// window opens, before any tunnel is told to go. It used to be logged once
// the window had passed, so an operator watching the log saw nothing for
// the whole window. Observed by events: when the first client gets its
// close, the line is there; the second close is 10s away.
func TestDrainLogAtStart(t *testing.T) {
	logs := &testproc.Buffer{}
	e := newEnvLog(t, 1, oneNodeWith("drain_window = \"20s\"\ndrain_timeout = \"30s\"", "", ""), slog.New(slog.NewTextHandler(logs, nil)))
	conns := []*websocket.Conn{e.mustDial("/room/a"), e.mustDial("/room/b")}
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.Tunnels() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("tunnels %d, want 2", e.srv.Tunnels())
		}
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan error, len(conns))
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		go func() {
			_, _, err := c.ReadMessage()
			closed <- err
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(ctx) }()
	if err := <-closed; !websocket.IsCloseError(err, 1001) {
		t.Fatalf("first client: %v, want close 1001", err)
	}
	if out := logs.String(); !strings.Contains(out, "msg=draining tunnels=2 window=20s timeout=30s") {
		t.Fatalf("first close sent, but no draining line yet:\n%s", out)
	}
	cancel() // cut the rest of the window short
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-closed
	for _, c := range conns {
		c.Close()
	}
	out := logs.String()
	// The first tunnel may still be closing when the rest is cut.
	if !regexp.MustCompile(`msg="tunnels drained" told=1 cut=[12]\n`).MatchString(out) {
		t.Fatalf("no end-of-drain line saying one was told and the rest cut:\n%s", out)
	}
	if strings.Index(out, "msg=draining") > strings.Index(out, "drain timeout: cutting tunnels") {
		t.Fatalf("draining logged after the cut:\n%s", out)
	}
}
