package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
)

// seenRequest is one request as a node received it.
type seenRequest struct {
	method, uri, host, proto, body string
	header                         http.Header
	te                             []string
}

// wireRecorder is a node that records every request it gets (health
// probes aside), answers plain requests 200 and upgrades WebSocket ones.
type wireRecorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

func newWireRecorder(t testing.TB) *wireRecorder {
	r := &wireRecorder{}
	up := websocket.Upgrader{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/healthz" {
			return
		}
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.seen = append(r.seen, seenRequest{
			method: req.Method, uri: req.RequestURI, host: req.Host, proto: req.Proto,
			body: string(body), header: req.Header.Clone(), te: req.TransferEncoding,
		})
		r.mu.Unlock()
		if websocket.IsWebSocketUpgrade(req) {
			if c, err := up.Upgrade(w, req, nil); err == nil {
				c.Close()
			}
			return
		}
		_, _ = io.WriteString(w, "node says hi\n")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *wireRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *wireRecorder) last() seenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[len(r.seen)-1]
}

// startGateway starts an in-process gateway on cfg (TOML) and stops it when
// the test ends.
func startGateway(t *testing.T, cfg string) *Server {
	t.Helper()
	return startGatewayLog(t, cfg, quietLog())
}

// startGatewayLog is startGateway with the gateway logging to log.
func startGatewayLog(t *testing.T, cfg string, log *slog.Logger) *Server {
	t.Helper()
	c, err := conf.Parse("admission.toml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(c, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// rawExchange writes req on a new connection to addr as is and reads the
// answer's status.
func rawExchange(t *testing.T, addr, req string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// wsHeaders are the headers of a valid handshake, less Host.
const wsHeaders = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"

// TestAdmissionShapes pins issue 9 item 4: every request on a route passes
// the route's shape checks, origins, limits and auth chain, whatever its
// shape. Before, a plain request skipped auth and origins and reached the
// node with forged plugin headers, hop-by-hop headers and Upgrade; an
// HTTP/1.0 or CL+TE upgrade took the plain path; a second
// Sec-WebSocket-Key was forwarded unchecked; an absolute-form request was
// routed by one host and forwarded with another. Each row is a raw request
// on a socket; a real node records what reached it.
func TestAdmissionShapes(t *testing.T) {
	t.Setenv("WSGATE_TEST_JWT", jwtSecret)
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	jwtBin := testproc.Build(t, "./plugins/jwt")
	node := newWireRecorder(t)
	srv := startGateway(t, fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "100ms"
drain_timeout = "5s"
trusted_proxies = ["127.0.0.0/8"]
[admin]
listen = ""
[[pools]]
name = "back"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/jwt/"
pool = "back"
auth = ["jwt"]
auth_headers = ["X-Tenant-Id"]
[[routes]]
path_prefix = "/locked/"
pool = "back"
origins = ["https://app.example"]
[[routes]]
path_prefix = "/ws-only/"
pool = "back"
plain_http = "refuse"
[[routes]]
host = "locked.example"
pool = "back"
auth = ["jwt"]
[[routes]]
pool = "back"
[[plugins]]
name = "jwt"
path = %q
  [plugins.config]
  hs256_secret_env = "WSGATE_TEST_JWT"
  issuer = "wsgate-test"
  claims_to_headers = { sub = "X-User-Id" }
`, node.srv.Listener.Addr().String(), jwtBin))
	gw := srv.Addr().String()
	tok := token(t, "alice", time.Now().Add(time.Hour), jwtSecret)
	authz := "Authorization: Bearer " + tok + "\r\n"
	forged := "X-User-Id: mallory\r\nX-Tenant-Id: evil\r\n"
	hops := "Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Authorization: Basic eDp5\r\nX-Hop: 1\r\n"

	// Checks on what the node received.
	cleanIdentity := func(t *testing.T, r seenRequest) {
		if got := r.header.Values("X-User-Id"); len(got) != 1 || got[0] != "alice" {
			t.Errorf("X-User-Id at the node = %q, want only the plugin's \"alice\"", got)
		}
		if got := r.header.Values("X-Tenant-Id"); len(got) != 0 {
			t.Errorf("X-Tenant-Id (an auth_headers name) reached the node: %q", got)
		}
	}
	noHops := func(t *testing.T, r seenRequest) {
		for _, k := range []string{"Keep-Alive", "Te", "Proxy-Authorization", "X-Hop", "Proxy-Connection"} {
			if v := r.header.Values(k); len(v) > 0 {
				t.Errorf("hop-by-hop %s reached the node: %q", k, v)
			}
		}
		if v := r.header.Values("Connection"); len(v) > 0 && !strings.EqualFold(strings.Join(v, ","), "upgrade") {
			t.Errorf("client's Connection reached the node: %q", v)
		}
	}
	hostIs := func(host, uri string) func(*testing.T, seenRequest) {
		return func(t *testing.T, r seenRequest) {
			if r.host != host || r.uri != uri {
				t.Errorf("node got Host %q target %q, want %q %q", r.host, r.uri, host, uri)
			}
		}
	}
	oneXFF := func(t *testing.T, r seenRequest) {
		if got := r.header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "1.1.1.1, 2.2.2.2, 127.0.0.1" {
			t.Errorf("X-Forwarded-For at the node = %q, want one line ending in the client's address", got)
		}
		if got := r.header.Values("X-Forwarded-Proto"); len(got) != 1 || got[0] != "http" {
			t.Errorf("X-Forwarded-Proto at the node = %q, want only http", got)
		}
	}
	twoXFF := "X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: https\r\n"
	// A backend that reads "_" or " " as "-" (CGI, WSGI, PHP, Rack) takes
	// these for X-User-Id and X-Tenant-Id.
	// A name with a space ("X User Id") is not a token: refused whole
	// (issue 19 item 12), below.
	aliases := "X_User_Id: mallory\r\nx_tenant_id: evil\r\n"
	noAliases := func(t *testing.T, r seenRequest) {
		fold := strings.NewReplacer("_", "-", " ", "-")
		for k, v := range r.header {
			name := fold.Replace(k)
			if k != "X-User-Id" && (strings.EqualFold(name, "X-User-Id") || strings.EqualFold(name, "X-Tenant-Id")) {
				t.Errorf("%q reached the node: %q", k, v)
			}
		}
	}
	plainOK := func(t *testing.T, r seenRequest) {
		if r.header.Get("Upgrade") != "" || websocket.IsWebSocketUpgrade(&http.Request{Header: r.header}) {
			t.Errorf("plain request reached the node as an upgrade: %v", r.header)
		}
	}

	cases := []struct {
		name  string
		req   string
		want  int
		check []func(*testing.T, seenRequest) // nil: nothing may reach the node
	}{
		// Plain requests pass the same checks.
		{"plain GET on an auth route without a token", "GET /jwt/info HTTP/1.1\r\nHost: gw\r\n" + forged + "\r\n",
			401, nil},
		{"plain POST on an auth route without a token", "POST /jwt/info HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello",
			401, nil},
		{"plain GET on an auth route with a token", "GET /jwt/info?x=1 HTTP/1.1\r\nHost: gw\r\n" + authz + forged +
			"Connection: keep-alive, X-Hop\r\n" + hops + "\r\n",
			200, []func(*testing.T, seenRequest){cleanIdentity, noHops, plainOK, hostIs("gw", "/jwt/info?x=1")}},
		{"plain POST body with a token", "POST /jwt/post HTTP/1.1\r\nHost: gw\r\n" + authz + "Content-Length: 5\r\n\r\nhello",
			200, []func(*testing.T, seenRequest){cleanIdentity, func(t *testing.T, r seenRequest) {
				if r.body != "hello" {
					t.Errorf("body at the node %q", r.body)
				}
			}}},
		{"plain chunked POST with a token", "POST /jwt/post HTTP/1.1\r\nHost: gw\r\n" + authz +
			"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			200, []func(*testing.T, seenRequest){cleanIdentity, func(t *testing.T, r seenRequest) {
				if r.body != "hello" {
					t.Errorf("body at the node %q", r.body)
				}
			}}},
		{"plain GET with plugin headers spelt with _", "GET /jwt/info HTTP/1.1\r\nHost: gw\r\n" + authz + aliases + "\r\n",
			200, []func(*testing.T, seenRequest){cleanIdentity, noAliases}},
		{"plain GET with a plugin header spelt with a space", "GET /jwt/info HTTP/1.1\r\nHost: gw\r\n" + authz + "X User Id: mallory\r\n\r\n",
			400, nil},
		{"plain GET with dot segments out of an auth prefix", "GET /jwt/../info HTTP/1.1\r\nHost: gw\r\n\r\n",
			200, []func(*testing.T, seenRequest){hostIs("gw", "/info")}},
		{"plain GET with encoded dot segments out of an auth prefix", "GET /jwt/%2e%2e/info?q=%2F HTTP/1.1\r\nHost: gw\r\n\r\n",
			200, []func(*testing.T, seenRequest){hostIs("gw", "/info?q=%2F")}},
		{"Host with a final dot on an auth host", "GET /info HTTP/1.1\r\nHost: locked.example.\r\n\r\n",
			401, nil},
		{"absolute-form target with a final dot on an auth host", "GET http://LOCKED.example./abs HTTP/1.1\r\nHost: open.example\r\n\r\n",
			401, nil},
		{"plain GET from a foreign origin", "GET /locked/info HTTP/1.1\r\nHost: gw\r\nOrigin: https://evil.example\r\n\r\n",
			403, nil},
		{"plain GET from an allowed origin", "GET /locked/info HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\n\r\n",
			200, []func(*testing.T, seenRequest){plainOK}},
		{"plain GET on a websocket-only route", "GET /ws-only/info HTTP/1.1\r\nHost: gw\r\n\r\n",
			426, nil},
		{"plain GET, HTTP/1.0", "GET /info HTTP/1.0\r\nHost: gw\r\n\r\n",
			200, []func(*testing.T, seenRequest){noHops, plainOK, hostIs("gw", "/info")}},
		{"plain GET with Connection: close", "GET /info HTTP/1.1\r\nHost: gw\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n\r\n",
			200, []func(*testing.T, seenRequest){noHops, plainOK}},
		{"Content-Length and Transfer-Encoding", "POST /info HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			400, nil},
		{"Transfer-Encoding: identity with Content-Length", "POST /info HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: identity\r\n" +
			"Content-Length: 5\r\n\r\nhello",
			400, nil},
		{"second Origin as a trailer field", "POST /locked/post HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nOrigin: https://evil.example\r\n\r\n",
			400, nil},
		{"trailer field the auth chain never saw", "POST /jwt/post HTTP/1.1\r\nHost: gw\r\n" + authz + "Trailer: X-Api-Key\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Api-Key: forged\r\n\r\n",
			400, nil},
		{"two Origin headers", "GET /locked/info HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nOrigin: https://evil.example\r\n\r\n",
			400, nil},
		{"absolute-form target", "GET http://open.example/abs?q=1 HTTP/1.1\r\nHost: locked.example\r\n\r\n",
			200, []func(*testing.T, seenRequest){hostIs("open.example", "/abs?q=1")}},
		{"absolute-form https target", "GET https://open.example/abs HTTP/1.1\r\nHost: open.example\r\n\r\n",
			200, []func(*testing.T, seenRequest){hostIs("open.example", "/abs")}},
		{"absolute-form target on an auth host", "GET http://locked.example/abs HTTP/1.1\r\nHost: open.example\r\n\r\n",
			401, nil},
		{"HTTP/1.1 without Host", "GET /info HTTP/1.1\r\n\r\n",
			400, nil},
		{"HTTP/1.0 without Host", "GET /info HTTP/1.0\r\n\r\n",
			400, nil},
		{"upgrade without Host", "GET /room HTTP/1.1\r\n" + wsHeaders + "\r\n",
			400, nil},
		{"absolute-form target with user info", "GET http://u:p@open.example/abs HTTP/1.1\r\nHost: open.example\r\n\r\n",
			400, nil},

		{"plain GET with two X-Forwarded-For", "GET /info HTTP/1.1\r\nHost: gw\r\n" + twoXFF + "\r\n",
			200, []func(*testing.T, seenRequest){oneXFF}},
		{"upgrade with two X-Forwarded-For", "GET /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + twoXFF + "\r\n",
			101, []func(*testing.T, seenRequest){oneXFF}},

		// Upgrade attempts are valid handshakes or refused, never proxied.
		{"upgrade", "GET /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + "\r\n",
			101, []func(*testing.T, seenRequest){hostIs("gw", "/room")}},
		{"upgrade, HTTP/1.0", "GET /room HTTP/1.0\r\nHost: gw\r\n" + wsHeaders + "\r\n",
			400, nil},
		{"upgrade with Content-Length and Transfer-Encoding", "GET /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders +
			"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			400, nil},
		{"upgrade with a body", "GET /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + "Content-Length: 5\r\n\r\nhello",
			400, nil},
		{"upgrade with two Sec-WebSocket-Key", "GET /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders +
			"Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
			400, nil},
		{"upgrade with two Sec-WebSocket-Version", "GET /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders +
			"Sec-WebSocket-Version: 8\r\n\r\n",
			400, nil},
		{"upgrade with two Origin", "GET /locked/room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders +
			"Origin: https://app.example\r\nOrigin: https://evil.example\r\n\r\n",
			400, nil},
		{"upgrade with version 8", "GET /room HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
			426, nil},
		{"upgrade by POST", "POST /room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + "\r\n",
			400, nil},
		{"Upgrade without Connection: upgrade", "GET /room HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
			400, nil},
		{"Connection: upgrade without Upgrade", "GET /room HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\n\r\n",
			400, nil},
		{"upgrade to h2c", "GET /room HTTP/1.1\r\nHost: gw\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n" +
			"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
			400, nil},
		{"upgrade with Connection: close", "GET /room HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: close, Upgrade\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
			400, nil},
		{"upgrade named in a second Connection header", "GET /room HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive\r\n" +
			"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
			101, []func(*testing.T, seenRequest){noHops}},
		{"upgrade on an auth route without a token", "GET /jwt/room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + forged + "\r\n",
			401, nil},
		{"upgrade on an auth route with a token", "GET /jwt/room HTTP/1.1\r\nHost: gw\r\n" + authz + forged +
			"Upgrade: websocket\r\nConnection: Upgrade, X-Hop\r\nSec-WebSocket-Version: 13\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + hops + "\r\n",
			101, []func(*testing.T, seenRequest){cleanIdentity, noHops}},
		{"upgrade with plugin headers spelt with _", "GET /jwt/room HTTP/1.1\r\nHost: gw\r\n" + authz + wsHeaders + aliases + "\r\n",
			101, []func(*testing.T, seenRequest){cleanIdentity, noAliases}},
		{"upgrade with a plugin header spelt with a space", "GET /jwt/room HTTP/1.1\r\nHost: gw\r\n" + authz + wsHeaders + "X User Id: mallory\r\n\r\n",
			400, nil},
		{"upgrade, Host with a final dot and a port on an auth host", "GET /room HTTP/1.1\r\nHost: locked.example.:8080\r\n" + wsHeaders + "\r\n",
			401, nil},
		{"upgrade from a foreign origin", "GET /locked/room HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + "Origin: https://evil.example\r\n\r\n",
			403, nil},
		{"upgrade, absolute-form target", "GET http://open.example/room?q=1 HTTP/1.1\r\nHost: locked.example\r\n" + wsHeaders + "\r\n",
			101, []func(*testing.T, seenRequest){hostIs("open.example", "/room?q=1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := node.count()
			if got := rawExchange(t, gw, tc.req); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
			after := node.count()
			if tc.check == nil {
				if after != before {
					t.Fatalf("the request reached the node: %+v", node.last())
				}
				return
			}
			if after != before+1 {
				t.Fatalf("the node got %d requests, want 1", after-before)
			}
			r := node.last()
			for _, check := range tc.check {
				check(t, r)
			}
		})
	}
}

// TestPlainHTTPCountsAgainstLimits pins that a plain request takes the
// limits step too: with max_conns_per_ip = 1 and a tunnel open, a plain GET
// from the same address is refused 429 (before, it went through).
func TestPlainHTTPCountsAgainstLimits(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith("max_conns_per_ip = 1", "", ""))
	c := e.mustDial("/room/x")
	if got := rawExchange(t, e.gw, "GET /info HTTP/1.1\r\nHost: gw\r\n\r\n"); got != http.StatusTooManyRequests {
		t.Fatalf("plain GET beside an open tunnel: %d, want 429", got)
	}
	c.Close()
	e.waitZero()
	if got := rawExchange(t, e.gw, "GET /info HTTP/1.1\r\nHost: gw\r\n\r\n"); got != http.StatusOK {
		t.Fatalf("plain GET alone: %d, want 200", got)
	}
	e.waitZero()
}
