package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/revoke"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/plugins/auth"
)

const jwtSecret = "test-secret-of-32-bytes-at-least!"

// recorder is a WebSocket backend that records the headers of every
// upgrade it accepts and echoes frames.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newRecorder(t testing.TB) *recorder {
	r := &recorder{}
	up := websocket.Upgrader{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/healthz" {
			return
		}
		r.mu.Lock()
		r.seen = append(r.seen, req.Header.Clone())
		r.mu.Unlock()
		c, err := up.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) addr() string { return strings.TrimPrefix(r.srv.URL, "http://") }

func (r *recorder) headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.seen...)
}

// authEnv is a gateway with the jwt and apikey plugins in front of a
// recording backend.
type authEnv struct {
	srv  *Server
	gw   string
	back *recorder
	keys string // the apikey plugin's key file
}

func newAuthEnv(t testing.TB) *authEnv { return newAuthEnvRevoking(t, "") }

// newAuthEnvRevoking is newAuthEnv sharing revocations on the Redis at
// revokeURL ("" = none).
func newAuthEnvRevoking(t testing.TB, revokeURL string) *authEnv {
	t.Helper()
	return newAuthEnvLog(t, revokeURL, quietLog(), false)
}

// newAuthEnvLog is newAuthEnvRevoking with the gateway logging to log,
// the access log on or off.
func newAuthEnvLog(t testing.TB, revokeURL string, log *slog.Logger, access bool) *authEnv {
	t.Helper()
	t.Setenv("WSGATE_TEST_JWT", jwtSecret)
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	jwtBin := testproc.Build(t, "./plugins/jwt")
	keyBin := testproc.Build(t, "./plugins/apikey")
	e := &authEnv{back: newRecorder(t), keys: filepath.Join(t.TempDir(), "keys.txt")}
	if err := os.WriteFile(e.keys, []byte("k1 alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Parse("auth.toml", []byte(fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "100ms"
drain_timeout = "5s"
revoke_redis = %q
[admin]
listen = "127.0.0.1:0"
[log]
access = %t
[[pools]]
name = "back"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/jwt/"
pool = "back"
auth = ["jwt"]
[[routes]]
path_prefix = "/key/"
pool = "back"
auth = ["apikey"]
[[routes]]
path_prefix = "/open/"
pool = "back"
[[plugins]]
name = "jwt"
path = %q
  [plugins.config]
  hs256_secret_env = "WSGATE_TEST_JWT"
  issuer = "wsgate-test"
  claims_to_headers = { sub = "X-User-Id" }
[[plugins]]
name = "apikey"
path = %q
  [plugins.config]
  file = %q
  cache_ttl = "50ms"
`, revokeURL, access, e.back.addr(), jwtBin, keyBin, e.keys)))
	if err != nil {
		t.Fatal(err)
	}
	e.srv, err = New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	e.gw = e.srv.Addr().String()
	t.Cleanup(func() { _ = e.srv.Shutdown(context.Background()) })
	return e
}

func token(t testing.TB, sub string, exp time.Time, secret string) string {
	claims := jwt.MapClaims{"sub": sub, "iss": "wsgate-test"}
	if !exp.IsZero() {
		claims["exp"] = exp.Unix()
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *authEnv) dial(path string, h http.Header) (*websocket.Conn, int, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial("ws://"+e.gw+path, h)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	return c, status, err
}

func bearer(tok string) http.Header {
	return http.Header{"Authorization": {"Bearer " + tok}, "X-User-Id": {"forged"}}
}

func TestJWTGate(t *testing.T) {
	e := newAuthEnv(t)
	hour := time.Now().Add(time.Hour)
	cases := []struct {
		name   string
		path   string
		header http.Header
		want   int
	}{
		{"valid token", "/jwt/a", bearer(token(t, "alice", hour, jwtSecret)), 101},
		{"token in query", "/jwt/a?access_token=" + token(t, "alice", hour, jwtSecret), nil, 101},
		{"expired", "/jwt/a", bearer(token(t, "alice", time.Now().Add(-time.Minute), jwtSecret)), 401},
		{"wrong signature", "/jwt/a", bearer(token(t, "alice", hour, "another-secret-of-32-bytes-at-least")), 401},
		{"missing", "/jwt/a", nil, 401},
		{"no auth on this route", "/open/a", nil, 101},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.back.headers())
			c, status, err := e.dial(tc.path, tc.header)
			if tc.want == 101 {
				if err != nil {
					t.Fatalf("want an upgrade, got %v (status %d)", err, status)
				}
				c.Close()
				return
			}
			if err == nil || status != tc.want {
				t.Fatalf("want %d, got %v (status %d)", tc.want, err, status)
			}
			if len(e.back.headers()) != before {
				t.Fatal("a refused handshake reached the backend")
			}
		})
	}
	// The backend saw the plugin's header, never the client's forgery.
	for _, h := range e.back.headers() {
		if got := h.Values("X-User-Id"); len(got) > 1 || (len(got) == 1 && got[0] != "alice") {
			t.Fatalf("backend saw X-User-Id %q", got)
		}
	}
	if got := e.back.headers()[0].Get("X-User-Id"); got != "alice" {
		t.Fatalf("backend saw X-User-Id %q, want alice from the token", got)
	}
}

// TestCredentialExpiryAndRevocation closes a tunnel with 1008 when its
// token expires, and closes a subject's tunnels on revocation.
func TestCredentialExpiryAndRevocation(t *testing.T) {
	e := newAuthEnv(t)
	short, _, err := e.dial("/jwt/x", bearer(token(t, "carol", time.Now().Add(2*time.Second), jwtSecret)))
	if err != nil {
		t.Fatal(err)
	}
	aliceToken := token(t, "alice", time.Now().Add(time.Hour), jwtSecret)
	alice, _, err := e.dial("/jwt/x", bearer(aliceToken))
	if err != nil {
		t.Fatal(err)
	}
	bob, _, err := e.dial("/jwt/x", bearer(token(t, "bob", time.Now().Add(time.Hour), jwtSecret)))
	if err != nil {
		t.Fatal(err)
	}
	_ = short.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, _, err := short.ReadMessage(); !websocket.IsCloseError(err, 1008) {
		t.Fatalf("expiring token: %v, want close 1008", err)
	}
	code, body := (&env{t: t, srv: e.srv}).admin(http.MethodPost, "/api/revoke", "")
	if code != 400 {
		t.Fatalf("revoke without a body: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.srv.AdminAddr().String()+"/api/revoke", strings.NewReader(`{"subject":"alice"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", err, resp)
	}
	resp.Body.Close()
	_ = alice.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := alice.ReadMessage(); !websocket.IsCloseError(err, 1008) {
		t.Fatalf("revoked subject: %v, want close 1008", err)
	}
	// The revoked subject cannot come back, neither on the token it used
	// (whose allow the jwt plugin had the gateway cache until its exp)
	// nor on a new one.
	if _, status, err := e.dial("/jwt/x", bearer(aliceToken)); err == nil || status != 401 {
		t.Fatalf("revoked subject reconnecting with its cached token: %v (status %d), want 401", err, status)
	}
	if _, status, err := e.dial("/jwt/x", bearer(token(t, "alice", time.Now().Add(2*time.Hour), jwtSecret))); err == nil || status != 401 {
		t.Fatalf("revoked subject reconnecting: %v (status %d), want 401", err, status)
	}
	if err := bob.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_ = bob.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, msg, err := bob.ReadMessage(); err != nil || string(msg) != "hi" {
		t.Fatalf("another subject's tunnel: %q %v", msg, err)
	}
	for _, c := range []*websocket.Conn{short, alice, bob} {
		c.Close()
	}
}

// TestAPIKeyFileEdit changes the key file under a running gateway: a new
// key is let in and a removed one refused, without a restart.
func TestAPIKeyFileEdit(t *testing.T) {
	e := newAuthEnv(t)
	key := func(k string) int {
		c, status, err := e.dial("/key/r", http.Header{"X-Api-Key": {k}})
		if err == nil {
			c.Close()
			return 101
		}
		return status
	}
	if got := key("k1"); got != 101 {
		t.Fatalf("k1: %d", got)
	}
	if got := key(""); got != 401 {
		t.Fatalf("no key: %d, want 401", got)
	}
	tmp := e.keys + ".new"
	if err := os.WriteFile(tmp, []byte("k2 bob\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.keys); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return key("k2") == 101 && key("k1") == 403 })
}

// TestPluginKilledFailsClosed kills the jwt plugin with SIGKILL while
// handshakes churn: those that need it get 503 until it is back, none gets
// through without a decision, an open tunnel is untouched, and the plugin
// is restarted.
func TestPluginKilledFailsClosed(t *testing.T) {
	e := newAuthEnv(t)
	tok := token(t, "alice", time.Now().Add(time.Hour), jwtSecret)
	open, _, err := e.dial("/jwt/keep", bearer(tok))
	if err != nil {
		t.Fatal(err)
	}
	pid := e.srv.plugins.Status()[1].PID // sorted: apikey, jwt
	var ok, refused, other atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A fresh token each time, so the decision cache cannot
				// answer for the dead plugin.
				c, status, err := e.dial("/jwt/churn", bearer(token(t, fmt.Sprintf("u%d-%d", w, i), time.Now().Add(time.Hour), jwtSecret)))
				switch {
				case err == nil:
					ok.Add(1)
					c.Close()
				case status == 503:
					refused.Add(1)
				default:
					other.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	waitUntil(t, func() bool { return ok.Load() > 20 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return refused.Load() > 0 })
	waitUntil(t, func() bool {
		st := e.srv.plugins.Status()[1]
		return st.Running && st.PID != pid
	})
	mark := ok.Load()
	waitUntil(t, func() bool { return ok.Load() > mark+20 })
	close(stop)
	wg.Wait()
	if other.Load() != 0 {
		t.Fatalf("%d handshakes failed otherwise than 503", other.Load())
	}
	for _, h := range e.back.headers() {
		if got := h.Get("X-User-Id"); got == "forged" || got == "" {
			t.Fatalf("a handshake reached the backend without the plugin's decision (X-User-Id %q)", got)
		}
	}
	if err := open.WriteMessage(websocket.TextMessage, []byte("still")); err != nil {
		t.Fatal(err)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, msg, err := open.ReadMessage(); err != nil || string(msg) != "still" {
		t.Fatalf("tunnel opened before the kill: %q %v", msg, err)
	}
	open.Close()
	t.Logf("handshakes: %d ok, %d refused with 503 while the plugin was down", ok.Load(), refused.Load())
}

// TestRevocationAcrossReplicas posts a revocation to one gateway: the
// subject's tunnel on another gateway sharing the Redis is closed with
// 1008 too.
func TestRevocationAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	a, b := newAuthEnvRevoking(t, rs.URL()), newAuthEnvRevoking(t, rs.URL())
	tok := token(t, "dave", time.Now().Add(time.Hour), jwtSecret)
	onB, _, err := b.dial("/jwt/r", bearer(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	start := time.Now()
	resp, err := http.Post("http://"+a.srv.AdminAddr().String()+"/api/revoke", "application/json", strings.NewReader(`{"subject":"dave"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke on a: %v %v", err, resp)
	}
	resp.Body.Close()
	_ = onB.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := onB.ReadMessage(); !websocket.IsCloseError(err, 1008) {
		t.Fatalf("tunnel on the other replica: %v, want 1008", err)
	}
	t.Logf("revocation posted to one replica closed the tunnel on the other in %v", time.Since(start))
}

// TestRevokeByKey revokes one API key by its credential id (the hex
// SHA-256 of the key): its tunnel closes with 1008 and it cannot come back,
// while another key of the same user keeps working.
func TestRevokeByKey(t *testing.T) {
	e := newAuthEnv(t)
	if err := os.WriteFile(e.keys+".new", []byte("k1 alice\nk2 alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.keys+".new", e.keys); err != nil {
		t.Fatal(err)
	}
	dialKey := func(k string) (*websocket.Conn, int, error) {
		return e.dial("/key/r", http.Header{"X-Api-Key": {k}})
	}
	var k2 *websocket.Conn
	waitUntil(t, func() bool {
		c, _, err := dialKey("k2")
		if err == nil {
			k2 = c
		}
		return err == nil
	})
	defer k2.Close()
	k1, _, err := dialKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	defer k1.Close()
	body := fmt.Sprintf(`{"key": %q}`, auth.CredentialHash("k1"))
	resp, err := http.Post("http://"+e.srv.AdminAddr().String()+"/api/revoke", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", err, resp)
	}
	resp.Body.Close()
	_ = k1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := k1.ReadMessage(); !websocket.IsCloseError(err, 1008) {
		t.Fatalf("revoked key: %v, want 1008", err)
	}
	if _, status, err := dialKey("k1"); err == nil || status != 401 {
		t.Fatalf("revoked key reconnecting: %v (status %d), want 401", err, status)
	}
	if err := k2.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_ = k2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, msg, err := k2.ReadMessage(); err != nil || string(msg) != "hi" {
		t.Fatalf("another key of the same user: %q %v", msg, err)
	}
}

// postRevoke posts body to gateway e's /api/revoke and fails unless it is
// accepted.
func (e *authEnv) postRevoke(t *testing.T, body string) {
	t.Helper()
	resp, err := http.Post("http://"+e.srv.AdminAddr().String()+"/api/revoke", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke %s: %v %v", body, err, resp)
	}
	resp.Body.Close()
}

// TestRevocationBeforeStartEnforced pins revocations living only in the
// memory of the gateways that heard them: one made before a gateway
// started was lost on it. Now it is stored in Redis with its ttl and the
// new gateway loads it before it serves; once the ttl has passed the
// subject is let back in, and Redis drops it with the next revocation.
func TestRevocationBeforeStartEnforced(t *testing.T) {
	rs := redistest.Start(t)
	a := newAuthEnvRevoking(t, rs.URL())
	a.postRevoke(t, `{"subject":"erin","ttl":"2s"}`)
	a.postRevoke(t, fmt.Sprintf(`{"key":%q,"ttl":"1h"}`, auth.CredentialHash("k1")))
	b := newAuthEnvRevoking(t, rs.URL())
	erin := bearer(token(t, "erin", time.Now().Add(time.Hour), jwtSecret))
	if _, status, err := b.dial("/jwt/r", erin); err == nil || status != 401 {
		t.Fatalf("subject revoked before this gateway started: %v (status %d), want 401", err, status)
	}
	if _, status, err := b.dial("/key/r", http.Header{"X-Api-Key": {"k1"}}); err == nil || status != 401 {
		t.Fatalf("key revoked before this gateway started: %v (status %d), want 401", err, status)
	}
	// The 2s ttl passes: erin is let back in, on both.
	deadline := time.Now().Add(15 * time.Second)
	for _, e := range []*authEnv{b, a} {
		for {
			c, status, err := e.dial("/jwt/r", erin)
			if err == nil {
				c.Close()
				break
			}
			if status != 401 || time.Now().After(deadline) {
				t.Fatalf("subject after its ttl: %v (status %d), want an upgrade", err, status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	a.postRevoke(t, `{"subject":"frank"}`)
	members, err := rdb.ZRange(context.Background(), revoke.SetKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2 || slices.Contains(members, "s:erin") {
		t.Fatalf("stored revocations %v: want the key and frank, erin expired", members)
	}
}

// TestRevocationWhileDisconnectedEnforced pins revocations riding only an
// at-most-once pub/sub channel: one published while a gateway's Redis
// connection was down never reached it. The gateway's Redis user is
// disabled and its connections killed, a revocation is made on another
// gateway, then the user is enabled again: once reconnected, the gateway
// closes the revoked subject's tunnel and refuses it.
func TestRevocationWhileDisconnectedEnforced(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	if err := rdb.Do(ctx, "ACL", "SETUSER", "gw-b", "on", ">pw-b", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	a := newAuthEnvRevoking(t, rs.URL())
	b := newAuthEnvRevoking(t, "redis://gw-b:pw-b@"+rs.Addr+"/0")
	erin := bearer(token(t, "erin", time.Now().Add(time.Hour), jwtSecret))
	onB, _, err := b.dial("/jwt/r", erin)
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()

	// Cut b off: it cannot log in again, and its connections are gone, so
	// nothing published from here on reaches its subscription.
	if err := rdb.Do(ctx, "ACL", "SETUSER", "gw-b", "off").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CLIENT", "KILL", "USER", "gw-b").Err(); err != nil {
		t.Fatal(err)
	}
	a.postRevoke(t, `{"subject":"erin"}`)
	if err := rdb.Do(ctx, "ACL", "SETUSER", "gw-b", "on").Err(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	_ = onB.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, _, err := onB.ReadMessage(); !websocket.IsCloseError(err, 1008) {
		t.Fatalf("tunnel on the gateway that was disconnected: %v, want 1008 once it reconnects", err)
	}
	t.Logf("Redis let the gateway back in -> revoked tunnel closed in %v", time.Since(back).Round(time.Millisecond))
	if _, status, err := b.dial("/jwt/r", erin); err == nil || status != 401 {
		t.Fatalf("revoked subject on the reconnected gateway: %v (status %d), want 401", err, status)
	}
}
