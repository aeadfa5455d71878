package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/internal/testproc"
)

// jsonLog is a JSON log into buf with the pid on every line, as
// cmd/wsgate builds it for [log] format = "json".
func jsonLog(buf *testproc.Buffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, nil)).With("pid", os.Getpid())
}

// accessLines parses the JSON lines of buf whose kind is kind.
func accessLines(t *testing.T, buf *testproc.Buffer, kind string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		if m["msg"] == "access" && m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// waitLines polls buf until ok holds for its access lines of kind, for
// at most 10s.
func waitLines(t *testing.T, buf *testproc.Buffer, kind string, ok func([]map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := accessLines(t, buf, kind)
		if ok(lines) {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s access line as expected within 10s; log:\n%s", kind, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAccessLogTunnelAndRefusal pins the access log: a tunnel the client
// closes gives one JSON line with its client, route, node, status, close
// code and closer, duration, frames and bytes each way and auth subject;
// a refused handshake gives one with status and reason; and the token,
// sent both in the query string and in Authorization, is in no line.
func TestAccessLogTunnelAndRefusal(t *testing.T) {
	var logs testproc.Buffer
	e := newAuthEnvLog(t, "", jsonLog(&logs), true)
	tok := token(t, "alice", time.Now().Add(time.Hour), jwtSecret)
	c, status, err := e.dial("/jwt/room?access_token="+tok, bearer(tok))
	if err != nil {
		t.Fatalf("dial: %v (status %d)", err, status)
	}
	client := c.LocalAddr().String()
	msg := []byte("hello, access log")
	if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
		t.Fatal(err)
	}
	if _, echo, err := c.ReadMessage(); err != nil || string(echo) != string(msg) {
		t.Fatalf("echo: %q, %v", echo, err)
	}
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			break // the node's close, echoed
		}
	}
	_ = c.Close()

	bad := "not-a-token-SECRET"
	if _, status, err := e.dial("/jwt/room?access_token="+bad, bearer(bad)); err == nil || status != http.StatusUnauthorized {
		t.Fatalf("bad token: status %d, err %v; want 401", status, err)
	}

	lines := waitLines(t, &logs, "tunnel", func(l []map[string]any) bool { return len(l) > 0 })
	if len(lines) != 1 {
		t.Fatalf("%d tunnel lines, want 1:\n%s", len(lines), logs.String())
	}
	l := lines[0]
	want := map[string]any{
		"client":     client,
		"path":       "/jwt/room",
		"route":      "*/jwt/",
		"node":       e.back.addr(),
		"status":     float64(101),
		"close_code": float64(1000),
		"close_by":   "client",
		"end":        "closed",
		"subject":    "alice",
		"pid":        float64(os.Getpid()),
		"level":      "INFO",
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("tunnel line %s = %v, want %v", k, l[k], v)
		}
	}
	// One text frame and the close each way; bytes are the frames' bytes
	// read (client frames are masked, 4 bytes more each).
	text := 2 + len(msg)
	closeIn := 2 + 2 + len("bye")
	closeOut := 2 + 2 // the node echoes the code alone
	nums := map[string]float64{
		"frames_in": 2, "frames_out": 2,
		"bytes_in": float64(text + 4 + closeIn + 4), "bytes_out": float64(text + closeOut),
	}
	for k, v := range nums {
		if l[k] != v {
			t.Errorf("tunnel line %s = %v, want %v", k, l[k], v)
		}
	}
	if d, ok := l["duration_ms"].(float64); !ok || d <= 0 {
		t.Errorf("tunnel line duration_ms = %v, want > 0", l["duration_ms"])
	}

	ref := waitLines(t, &logs, "refused", func(l []map[string]any) bool { return len(l) > 0 })
	if len(ref) != 1 || ref[0]["status"] != float64(401) || ref[0]["reason"] != "auth_denied" || ref[0]["path"] != "/jwt/room" {
		t.Errorf("refusal lines: %v, want one with status 401, reason auth_denied, path /jwt/room", ref)
	}
	for _, secret := range []string{tok, bad, "SECRET", "access_token"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows %q:\n%s", secret, logs.String())
		}
	}
}

const originOnly = `
[gateway]
listen = %[1]q
max_conns_per_ip = %[3]d
[admin]
listen = ""
[log]
access = %[4]t
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %[2]q
[[routes]]
pool = "relay"
origins = ["https://app.example"]
`

// refuseOrigin sends one handshake with a foreign origin (403) on a new
// connection and reads the answer to its end.
func refuseOrigin(gw, query string) error {
	c, err := net.DialTimeout("tcp", gw, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = fmt.Fprintf(c, "GET /ws%s HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: https://evil.example\r\n"+
		"Authorization: Bearer SECRET\r\n\r\n", query)
	if err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		return fmt.Errorf("status %d, want 403", resp.StatusCode)
	}
	return nil
}

// TestAccessLogRefusalFlood pins the sampling of refusal lines: a flood
// of at least 500 refused handshakes, lasting several RefusalLogEvery,
// writes at most one line per RefusalLogEvery (plus the last count), keeps
// writing sampled lines while it lasts, and the lines' dropped counts
// account for every refusal left out.
func TestAccessLogRefusalFlood(t *testing.T) {
	var logs testproc.Buffer
	e := newEnvLog(t, 1, originOnlyCfg(0, true), jsonLog(&logs))
	const floor, workers = 500, 4
	minTime := 5 * telemetry.RefusalLogEvery
	start := time.Now()
	var wg sync.WaitGroup
	var sent atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Load() < floor || time.Since(start) < minTime {
				if err := refuseOrigin(e.gw, "?access_token=SECRET"); err != nil {
					errs <- err
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := int(sent.Load())
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	count := func(l []map[string]any) (written, dropped int) {
		for _, m := range l {
			if m["status"] != nil {
				written++
			}
			d, _ := m["dropped"].(float64)
			dropped += int(d)
		}
		return
	}
	lines := waitLines(t, &logs, "refused", func(l []map[string]any) bool {
		w, d := count(l)
		return w+d >= total
	})
	written, dropped := count(lines)
	if written+dropped != total {
		t.Errorf("%d lines written + %d dropped, want %d refusals", written, dropped, total)
	}
	// A line every RefusalLogEvery while the flood lasts, give or take
	// the scheduling of a loaded machine: at least half of them.
	least, most := int(elapsed/telemetry.RefusalLogEvery)/2, int(elapsed/telemetry.RefusalLogEvery)+2
	if written > most || written < least {
		t.Errorf("%d refusal lines in %v, want %d to %d", written, elapsed, least, most)
	}
	for _, m := range lines {
		if m["status"] != nil && (m["status"] != float64(403) || m["reason"] != "origin" || m["path"] != "/ws") {
			t.Errorf("refusal line %v, want status 403, reason origin, path /ws", m)
		}
	}
	if strings.Contains(logs.String(), "SECRET") {
		t.Errorf("the log shows the credential:\n%s", logs.String())
	}
	t.Logf("%d refusals in %v: %d lines, %d dropped", total, elapsed, written, dropped)
}

// originOnlyCfg is originOnly with max_conns_per_ip and [log] access set
// (newEnv fills in the addresses).
func originOnlyCfg(perIP int, access bool) string {
	return strings.NewReplacer("%[3]d", fmt.Sprint(perIP), "%[4]t", fmt.Sprint(access)).Replace(originOnly)
}

// TestAccessLogOffByDefault pins that without [log] access no access
// line is written, for a tunnel or a refusal.
func TestAccessLogOffByDefault(t *testing.T) {
	var logs testproc.Buffer
	e := newEnvLog(t, 1, strings.Replace(originOnlyCfg(0, false), "access = false\n", "", 1), jsonLog(&logs))
	if err := refuseOrigin(e.gw, ""); err != nil {
		t.Fatal(err)
	}
	c, _, err := e.dial("/room/off", http.Header{"Origin": {"https://app.example"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	_ = c.Close()
	e.waitZero()
	if n := len(accessLines(t, &logs, "tunnel")) + len(accessLines(t, &logs, "refused")); n != 0 {
		t.Errorf("%d access lines with the access log off:\n%s", n, logs.String())
	}
}

// TestAccessLogRefusedAtAccept pins the line of a connection refused at
// accept (over max_conns_per_ip): status 429, reason max_conns_per_ip.
func TestAccessLogRefusedAtAccept(t *testing.T) {
	var logs testproc.Buffer
	e := newEnvLog(t, 1, originOnlyCfg(1, true), jsonLog(&logs))
	first, err := net.Dial("tcp", e.gw)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first connection holds the address's one place once accepted:
	// a second one is refused, which the poll below waits for.
	deadline := time.Now().Add(10 * time.Second)
	for len(accessLines(t, &logs, "refused")) == 0 && time.Now().Before(deadline) {
		c, err := net.Dial("tcp", e.gw)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = bufio.NewReader(c).ReadString('\n')
		_ = c.Close()
	}
	l := waitLines(t, &logs, "refused", func(l []map[string]any) bool { return len(l) > 0 })[0]
	if l["status"] != float64(429) || l["reason"] != "max_conns_per_ip" || !strings.HasPrefix(l["client"].(string), "127.0.0.1:") {
		t.Errorf("refusal line %v, want status 429, reason max_conns_per_ip, a client address", l)
	}
}
