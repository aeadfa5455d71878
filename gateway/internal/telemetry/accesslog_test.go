package telemetry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// syncBuffer is a log sink safe for the access log's flush timer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// lines parses the JSON lines written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// jsonAccessLog is an access log into a JSON log, on while *on is.
func jsonAccessLog(on *bool) (*AccessLog, *syncBuffer) {
	buf := &syncBuffer{}
	return NewAccessLog(slog.New(slog.NewJSONHandler(buf, nil)), func() bool { return *on }), buf
}

// TestAccessLogTunnelLine checks the line of a tunnel that ended: what
// its handshake recorded, the close code of the first closer, and frames
// and bytes each way; no duration_ms without a start; nothing while off.
func TestAccessLogTunnelLine(t *testing.T) {
	on := true
	a, buf := jsonAccessLog(&on)
	st := tunnel.Stats{
		FramesToNode: 2, BytesToNode: 30, FramesToClient: 4, BytesToClient: 50,
		ClientCloseCode: 1000, NodeCloseCode: 1000, GatewayToNodeCode: 1001,
		FirstClose: tunnel.ByNode, End: tunnel.EndClosed,
	}
	a.Tunnel(TunnelLine{
		Client: "192.0.2.1:5000", Path: "/room/a", Route: "*/room/", Node: "10.0.0.1:80",
		Subject: "alice", Start: time.Now().Add(-time.Second),
	}, st)
	a.Tunnel(TunnelLine{Node: "10.0.0.1:80"}, tunnel.Stats{FirstClose: tunnel.ByGateway, GatewayToClientCode: 1001, GatewayToNodeCode: 1011, End: tunnel.EndAborted})
	on = false
	a.Tunnel(TunnelLine{Node: "10.0.0.1:80"}, st)
	lines := buf.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (none while off): %v", len(lines), lines)
	}
	want := map[string]any{
		"msg": "access", "kind": "tunnel", "client": "192.0.2.1:5000", "path": "/room/a", "route": "*/room/",
		"node": "10.0.0.1:80", "status": float64(101), "close_code": float64(1000), "close_by": "node",
		"end": "closed", "frames_in": float64(2), "bytes_in": float64(30), "frames_out": float64(4),
		"bytes_out": float64(50), "subject": "alice",
	}
	for k, v := range want {
		if lines[0][k] != v {
			t.Errorf("line %s = %v, want %v", k, lines[0][k], v)
		}
	}
	if d, ok := lines[0]["duration_ms"].(float64); !ok || d < 1000 {
		t.Errorf("duration_ms = %v, want at least 1000", lines[0]["duration_ms"])
	}
	l := lines[1]
	if l["close_code"] != float64(1011) || l["close_by"] != "gateway" || l["client"] != "" || l["end"] != "aborted" {
		t.Errorf("gateway-closed line %v, want close_code 1011 (the larger of the gateway's), close_by gateway, no client", l)
	}
	if _, ok := l["duration_ms"]; ok {
		t.Errorf("line without a start has duration_ms: %v", l)
	}
}

// TestAccessLogRefusalSampled checks that a burst of refusals writes a
// line at once and, once it stops, a line with the count left out: every
// refusal is in a line or a count.
func TestAccessLogRefusalSampled(t *testing.T) {
	on := true
	a, buf := jsonAccessLog(&on)
	const burst = 50
	for range burst {
		a.refused(nil, "/ws", 403, "origin")
	}
	count := func(lines []map[string]any) (written, dropped int) {
		for _, m := range lines {
			if m["status"] != nil {
				written++
			}
			d, _ := m["dropped"].(float64)
			dropped += int(d)
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for w, d := count(buf.lines(t)); w+d < burst; w, d = count(buf.lines(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines + %d dropped within 10s, want %d refusals: %v", w, d, burst, buf.lines(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	lines := buf.lines(t)
	if w, d := count(lines); w+d != burst {
		t.Errorf("%d lines + %d dropped, want %d refusals", w, d, burst)
	}
	first := lines[0]
	if first["status"] != float64(403) || first["reason"] != "origin" || first["path"] != "/ws" || first["dropped"] != float64(0) || first["client"] != "" {
		t.Errorf("first line %v, want status 403, reason origin, path /ws, dropped 0, no client", first)
	}
	// Refusals the lines left out are counted in a line of the count
	// alone, once they stop: there is at most one, the last (how the burst
	// splits over RefusalLogEvery depends on the machine's speed).
	for i, m := range lines {
		if m["status"] == nil && (i != len(lines)-1 || m["dropped"] == float64(0)) {
			t.Errorf("line %d of %d is a count %v; want only the last, and not 0", i, len(lines), m)
		}
	}
}

// TestAccessLogNil checks that a listener without access log (nil) can
// report a refused connection.
func TestAccessLogNil(t *testing.T) {
	var a *AccessLog
	a.Connection(nil, 503, "max_conns")
}
