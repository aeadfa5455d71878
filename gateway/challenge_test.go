package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestDenyChallenges pins issue 19 item 16: a deny answered 401 with no
// WWW-Authenticate, and a plugin could not set one. The example plugins,
// built and loaded, now send their own challenge (jwt: RFC 6750's Bearer
// with invalid_token for a refused token; apikey: where the key goes); a
// 403 gets none.
func TestDenyChallenges(t *testing.T) {
	e := newAuthEnv(t)
	for _, tc := range []struct {
		name, path string
		header     http.Header
		status     int
		challenge  string // "" = none
	}{
		{"jwt missing", "/jwt/a", nil, 401, `Bearer realm="wsgate"`},
		{"jwt expired", "/jwt/a", bearer(token(t, "alice", time.Now().Add(-time.Minute), jwtSecret)), 401,
			`Bearer realm="wsgate", error="invalid_token", error_description="token expired"`},
		{"apikey missing", "/key/a", nil, 401, `ApiKey realm="wsgate", header="X-Api-Key", query="api_key"`},
		{"apikey unknown", "/key/a", http.Header{"X-Api-Key": {"nope"}}, 403, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h := denyAnswer(t, e.gw, tc.path, tc.header)
			if status != tc.status {
				t.Fatalf("status %d, want %d", status, tc.status)
			}
			if got := h.Values("WWW-Authenticate"); (tc.challenge == "" && len(got) != 0) || (tc.challenge != "" && (len(got) != 1 || got[0] != tc.challenge)) {
				t.Fatalf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
		})
	}
}

// TestDenyDefaultChallenge pins issue 19 item 16 for a plugin that sets
// no challenge (the guide's example, built and loaded): its 401 gets the
// gateway's default, and its 403 none.
func TestDenyDefaultChallenge(t *testing.T) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	demo := testproc.Build(t, "./plugins/example")
	back := newRecorder(t)
	cfg, err := conf.Parse("demo.toml", []byte(fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
[admin]
listen = ""
[[pools]]
name = "back"
  [[pools.nodes]]
  addr = %q
[[routes]]
pool = "back"
auth = ["demo"]
[[plugins]]
name = "demo"
path = %q
  [plugins.config]
  token = "let-me-in"
  user = "demo-user"
`, back.addr(), demo)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	status, h := denyAnswer(t, srv.Addr().String(), "/a", nil)
	if got := h.Values("WWW-Authenticate"); status != 401 || len(got) != 1 || got[0] != admit.DefaultChallenge {
		t.Fatalf("status %d, WWW-Authenticate %q; want 401 and %q", status, got, admit.DefaultChallenge)
	}
	status, h = denyAnswer(t, srv.Addr().String(), "/a", http.Header{"X-Demo-Token": {"wrong"}})
	if got := h.Values("WWW-Authenticate"); status != 403 || len(got) != 0 {
		t.Fatalf("status %d, WWW-Authenticate %q; want 403 and none", status, got)
	}
}

// TestDenyResponseHeadersOnTheWire pins issue 19 item 16's allow-list on
// the answer a client gets: a deny's WWW-Authenticate, Retry-After,
// Cache-Control and X- headers reach it; a deny that sets any other
// (Set-Cookie here) is a malformed decision, answered 503 without the
// plugin's headers, and logged.
func TestDenyResponseHeadersOnTheWire(t *testing.T) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	plugin := testproc.Build(t, "./plugins/internal/testplugin")
	var logs testproc.Buffer
	srv := startGatewayLog(t, recorderConfig("", newWireRecorder(t))+
		fmt.Sprintf("auth = [\"t\"]\n[[plugins]]\nname = \"t\"\npath = %q\n", plugin), slog.New(slog.NewJSONHandler(&logs, nil)))
	gw := srv.Addr().String()

	status, h := denyAnswer(t, gw, "/deny-headers?WWW-Authenticate=Basic&Retry-After=7&Cache-Control=no-store&X-Request-Id=r1", nil)
	if status != 401 {
		t.Fatalf("status %d, want 401", status)
	}
	for k, v := range map[string]string{"WWW-Authenticate": "Basic", "Retry-After": "7", "Cache-Control": "no-store", "X-Request-Id": "r1"} {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s %q, want %q", k, got, v)
		}
	}

	status, h = denyAnswer(t, gw, "/deny-headers?WWW-Authenticate=Basic&Set-Cookie=session%3Dx", nil)
	if status != 503 || h.Get("Set-Cookie") != "" || h.Get("WWW-Authenticate") != "" {
		t.Fatalf("status %d, headers %v; want 503 without the plugin's headers", status, h)
	}
	if !strings.Contains(logs.String(), "response header Set-Cookie is not one a deny may set") {
		t.Fatalf("the refused header is not logged:\n%s", logs.String())
	}
}

// denyAnswer dials path on gw, wants a refusal, and returns its status
// and headers.
func denyAnswer(t *testing.T, gw, path string, h http.Header) (int, http.Header) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial("ws://"+gw+path, h)
	if err == nil {
		c.Close()
		t.Fatal("handshake was let through")
	}
	if resp == nil {
		t.Fatalf("no answer: %v", err)
	}
	return resp.StatusCode, resp.Header
}
