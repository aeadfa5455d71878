package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

const withAdmin = `
[gateway]
listen = %[1]q
drain_window = "300ms"
drain_timeout = "5s"
[admin]
listen = "127.0.0.1:0"
[[pools]]
name = "relay"
  [pools.health]
  interval = "50ms"
  timeout = "40ms"
  [[pools.nodes]]
  addr = %[2]q
  [[pools.nodes]]
  addr = %[3]q
[[routes]]
pool = "relay"
`

func (e *env) admin(method, path, token string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, "http://"+e.srv.AdminAddr().String()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // what a script sends
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// scrape reads /metrics through the Prometheus text parser.
func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	code, body := e.admin(http.MethodGet, "/metrics", "")
	if code != 200 {
		e.t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		e.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// TestMetricsMatchRelays loads the gateway, then checks the scraped
// per-node connection gauge equals each relay's own count, and that frames
// and handshakes were counted.
func TestMetricsMatchRelays(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	var conns []*websocket.Conn
	for i := range 30 {
		c := e.mustDial(fmt.Sprintf("/room/m%d", i%5))
		conns = append(conns, c)
	}
	for _, c := range conns[:10] {
		if err := c.WriteMessage(websocket.TextMessage, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Every room member gets the frames: wait until the gateway counted
	// them both ways (the members' copies can pass 10 toward the clients
	// before the last of the 10 is counted toward the nodes).
	waitUntil(t, func() bool {
		tot := e.srv.tunnels.Totals()
		return tot.FramesToNode >= 10 && tot.FramesToClient >= 10
	})
	fams := e.scrape()
	got := map[string]float64{}
	for _, m := range fams["wsgate_connections"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "node" {
				got[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for i, r := range e.relays {
		if want := float64(r.Info().Connections); got[e.addrs[i]] != want {
			t.Errorf("wsgate_connections{node=%q} = %v, relay says %v", e.addrs[i], got[e.addrs[i]], want)
		}
	}
	if v := counter(fams, "wsgate_handshakes_total", "result", "ok"); v != 30 {
		t.Errorf("ok handshakes = %v, want 30", v)
	}
	if v := counter(fams, "wsgate_frames_total", "direction", "to_node"); v < 10 {
		t.Errorf("frames to nodes = %v, want >= 10", v)
	}
	// Probes run on their own clock (first one within an interval).
	waitUntil(t, func() bool { return e.scrape()["wsgate_health_checks_total"] != nil })
	for _, c := range conns {
		c.Close()
	}
	e.waitZero()
	if v := counter(e.scrape(), "wsgate_frames_total", "direction", "to_node"); v < 10 {
		t.Errorf("frames to nodes went down to %v after tunnels ended", v)
	}
}

func counter(fams map[string]*dto.MetricFamily, name, label, value string) float64 {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

func TestAdminAPIErrors(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	cases := []struct {
		method, path string
		want         int
		msg          string
	}{
		{"POST", "/api/pools/nope/nodes/x/drain", 404, `no pool \"nope\"`},
		{"POST", "/api/pools/relay/nodes/127.0.0.1:1/drain", 404, `has no node \"127.0.0.1:1\"`},
		{"GET", "/api/pools/relay/nodes/" + e.addrs[0] + "/drain", 405, "use POST"},
		{"POST", "/api/pools/relay/drain", 404, "want /api/pools"},
		{"POST", "/api/nodes", 405, "use GET"},
		{"GET", "/api/nope", 404, "no admin endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			code, body := e.admin(tc.method, tc.path, "")
			if code != tc.want || !strings.Contains(string(body), tc.msg) {
				t.Fatalf("%d %s, want %d with %q", code, body, tc.want, tc.msg)
			}
			var j map[string]string
			if err := json.Unmarshal(body, &j); err != nil || j["error"] == "" {
				t.Fatalf("not a JSON error: %s", body)
			}
		})
	}
	code, body := e.admin("GET", "/api/nodes", "")
	var v admin.Nodes
	if err := json.Unmarshal(body, &v); code != 200 || err != nil || len(v.Pools) != 1 || len(v.Pools[0].Nodes) != 2 {
		t.Fatalf("/api/nodes: %d %v %s", code, err, body)
	}
	code, body = e.admin("GET", "/api/config", "")
	if code != 200 || !strings.Contains(string(body), `"max_conns_per_node": 50000`) {
		t.Fatalf("/api/config: %d %s", code, body)
	}
}

func TestAdminToken(t *testing.T) {
	t.Setenv("WSGATE_TEST_TOKEN", "s3cret")
	e := newEnv(t, 2, strings.Replace(withAdmin, `listen = "127.0.0.1:0"`, `listen = "127.0.0.1:0"
token_env = "WSGATE_TEST_TOKEN"`, 1))
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/api/nodes", "", 401},
		{"/api/nodes", "wrong", 401},
		{"/api/nodes", "s3cret", 200},
		{"/metrics", "", 401},
		{"/metrics", "s3cret", 200},
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/", "", 200},
	} {
		if code, _ := e.admin("GET", tc.path, tc.token); code != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d", tc.path, tc.token, code, tc.want)
		}
	}
}

// TestAdminConfigHidesRedisPassword pins GET /api/config showing the
// password inside gateway.revoke_redis in clear.
func TestAdminConfigHidesRedisPassword(t *testing.T) {
	rs := redistest.Start(t)
	// The default user has no password, so Redis takes any for it: the
	// gateway really connects with this URL.
	cfg := strings.Replace(withAdmin, "[admin]", "revoke_redis = \"redis://default:hunter2@"+rs.Addr+"/0\"\n[admin]", 1)
	e := newEnv(t, 2, cfg)
	code, body := e.admin(http.MethodGet, "/api/config", "")
	if code != 200 || strings.Contains(string(body), "hunter2") || !strings.Contains(string(body), `"revoke_redis": "redis://default:REDACTED@`) {
		t.Fatalf("/api/config: %d %s", code, body)
	}
	if e.srv.current().cfg.Gateway.RevokeRedis != "redis://default:hunter2@"+rs.Addr+"/0" {
		t.Fatal("redaction changed the running config")
	}
}

// TestRevokeRedisErrorHidesPassword pins the start-up error that quoted
// gateway.revoke_redis whole, password included, into the log.
func TestRevokeRedisErrorHidesPassword(t *testing.T) {
	cfg, err := conf.Parse("test.toml", []byte(fmt.Sprintf(withAdmin+"\n", "127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2")))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.RevokeRedis = "redis://default:hunter2@" + testproc.FreeAddr(t) + "/0" // nothing listens there
	s, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start()
	if err == nil {
		_ = s.Shutdown(context.Background())
		t.Fatal("started without its revocation Redis")
	}
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "default:REDACTED@") {
		t.Fatalf("error %q", err)
	}
}

// TestDrainMigrateMovesClients drains one node with migrate=1: every one of
// its clients gets 1001 and reconnects, all to the other node, and no
// handshake fails meanwhile.
func TestDrainMigrateMovesClients(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	type cl struct {
		c    *websocket.Conn
		node string
	}
	var cls []cl
	for range 20 {
		c := e.mustDial("/room/mig?hello=1")
		var h struct{ Replica string }
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.ReadJSON(&h); err != nil {
			t.Fatal(err)
		}
		cls = append(cls, cl{c, h.Replica})
	}
	drained := e.addrs[0]
	code, body := e.admin("POST", "/api/pools/relay/nodes/"+drained+"/drain?migrate=1", "")
	if code != 200 || !strings.Contains(string(body), `"migrating": 10`) {
		t.Fatalf("drain: %d %s", code, body)
	}
	failed := e.srv.metrics.HandshakeCounts()
	for _, x := range cls {
		if x.node != "relay-1" {
			continue
		}
		_, _, err := x.c.ReadMessage()
		if !websocket.IsCloseError(err, 1001) {
			t.Fatalf("client on the drained node: %v, want 1001", err)
		}
		x.c.Close()
		c := e.mustDial("/room/mig?hello=1")
		var h struct{ Replica string }
		if err := c.ReadJSON(&h); err != nil || h.Replica != "relay-2" {
			t.Fatalf("reconnected to %q (%v), want relay-2", h.Replica, err)
		}
		c.Close()
	}
	after := e.srv.metrics.HandshakeCounts()
	for r, n := range after {
		if r != "ok" && n != failed[r] {
			t.Errorf("handshakes %s went from %d to %d during the migration", r, failed[r], n)
		}
	}
	waitUntil(t, func() bool { return e.relays[0].Info().Connections == 0 })
	for _, x := range cls {
		x.c.Close()
	}
	e.waitZero()

	// Undrained, the node keeps its new clients again.
	if code, body := e.admin("POST", "/api/pools/relay/nodes/"+drained+"/undrain", ""); code != 200 {
		t.Fatalf("undrain: %d %s", code, body)
	}
	waitUntil(t, func() bool { return e.srv.current().pools["relay"].Node(drained).State().String() == "up" })
	// Two clients: least_conn puts one on each relay.
	var back, other *websocket.Conn
	for range 2 {
		c := e.mustDial("/room/back?hello=1")
		var h struct{ Replica string }
		if err := c.ReadJSON(&h); err != nil {
			t.Fatal(err)
		}
		if h.Replica == "relay-1" {
			back = c
		} else {
			other = c
		}
	}
	if back == nil || other == nil {
		t.Fatal("after undrain, two clients did not land one on each relay")
	}
	if err := other.WriteMessage(websocket.TextMessage, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = back.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, msg, err := back.ReadMessage(); err != nil || string(msg) != "x" {
		t.Fatalf("client of the undrained node: %q %v (closed as if still leaving?)", msg, err)
	}
	back.Close()
	other.Close()
	e.waitZero()
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// browserShape is one way to send a request to the admin API: what a web
// page on another site can send without a CORS preflight, what a
// DNS-rebinding page sends, or what a script and the dashboard send.
type browserShape struct {
	name        string
	contentType string // "" = no Content-Type
	origin      string // "" = none; "OWN" = the admin listener's own origin
	host        string // "" = the admin listener's address; PORT = its port
	adminHeader bool   // X-Wsgate-Admin: 1
	body        string // "" = the endpoint's own body
}

// send makes one admin request of the given shape, with token as bearer
// token when not "".
func (e *env) send(method, path, body string, sh browserShape, token string) (int, string) {
	e.t.Helper()
	addr := e.srv.AdminAddr().String()
	_, port, _ := strings.Cut(addr, ":")
	if sh.body != "" {
		body = sh.body
	}
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if sh.host != "" {
		req.Host = strings.ReplaceAll(sh.host, "PORT", port)
	}
	switch sh.origin {
	case "":
	case "OWN":
		req.Header.Set("Origin", "http://"+req.Host)
	default:
		req.Header.Set("Origin", strings.ReplaceAll(sh.origin, "PORT", port))
	}
	if sh.contentType != "" {
		req.Header.Set("Content-Type", sh.contentType)
	}
	if sh.adminHeader {
		req.Header.Set("X-Wsgate-Admin", "1")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// multipartBody is what a form with enctype="multipart/form-data" posts.
const multipartBody = "--b\r\nContent-Disposition: form-data; name=\"subject\"\r\n\r\nmallory\r\n--b--\r\n"

// crossSiteShapes are the requests a page on another site can make a
// browser send to a state-changing admin endpoint, each with the status
// and the words of the refusal.
var crossSiteShapes = []struct {
	browserShape
	want int
	msg  string
}{
	{browserShape{name: "form urlencoded", contentType: "application/x-www-form-urlencoded", body: "subject=mallory"}, 415, `needs \"Content-Type: application/json\"`},
	{browserShape{name: "multipart form", contentType: "multipart/form-data; boundary=b", body: multipartBody}, 415, `got Content-Type \"multipart/form-data`},
	{browserShape{name: "text/plain", contentType: "text/plain"}, 415, `got Content-Type \"text/plain\"`},
	{browserShape{name: "no Content-Type"}, 415, "got Content-Type none"},
	{browserShape{name: "json only as a parameter", contentType: "text/plain; x=application/json"}, 415, "needs"},
	{browserShape{name: "form from a foreign Origin", contentType: "application/x-www-form-urlencoded", origin: "http://evil.example"}, 403, `Origin \"http://evil.example\" is not this admin listener's own`},
	{browserShape{name: "text/plain from a foreign Origin", contentType: "text/plain", origin: "https://evil.example"}, 403, "page on another site may not change admin state"},
	{browserShape{name: "json from a foreign Origin", contentType: "application/json", origin: "http://evil.example"}, 403, "not this admin listener's own"},
	{browserShape{name: "header from another local port", adminHeader: true, origin: "http://127.0.0.1:1"}, 403, "not this admin listener's own"},
	{browserShape{name: "form from Origin null", contentType: "application/x-www-form-urlencoded", origin: "null"}, 403, `Origin \"null\"`},
	{browserShape{name: "header from Origin null", adminHeader: true, origin: "null"}, 403, `Origin \"null\"`},
	{browserShape{name: "DNS rebinding, text/plain", contentType: "text/plain", host: "evil.example:PORT", origin: "OWN"}, 403, `Host \"evil.example:`},
	{browserShape{name: "DNS rebinding, json", contentType: "application/json", host: "evil.example:PORT", origin: "OWN"}, 403, `add \"evil.example\" to admin.hosts`},
	{browserShape{name: "DNS rebinding, no Origin", adminHeader: true, host: "evil.example:PORT"}, 403, "does not name this admin listener"},
}

// ownShapes are the requests a script or the dashboard sends; each must
// reach the endpoint.
var ownShapes = []browserShape{
	{name: "json", contentType: "application/json"},
	{name: "json with charset", contentType: "application/json; charset=utf-8"},
	{name: "admin header", adminHeader: true},
	{name: "dashboard fetch", adminHeader: true, origin: "OWN"},
	{name: "localhost", contentType: "application/json", host: "localhost:PORT", origin: "OWN"},
	{name: "ssh tunnel port", contentType: "application/json", host: "localhost:18080", origin: "OWN"},
	{name: "ipv6 loopback", contentType: "application/json", host: "[::1]:PORT"},
	{name: "admin.hosts name", adminHeader: true, host: "GW1.example.test:9443", origin: "OWN"},
}

// TestAdminRefusesCrossSite pins the admin API taking state changes from
// pages on other sites: with the default loopback admin, a form or a
// text/plain fetch from any page (or a DNS-rebinding page, Host:
// evil.example) could drain nodes, undrain them, reload and revoke. Every
// such shape must now be refused without effect, with a token configured
// or not, and the shapes a script or the dashboard sends must still work.
func TestAdminRefusesCrossSite(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			cfg := strings.Replace(withAdmin, "[admin]\n", "[admin]\nhosts = [\"gw1.example.test\"]\n", 1)
			if token != "" {
				t.Setenv("WSGATE_TEST_TOKEN", token)
				cfg = strings.Replace(cfg, "[admin]\n", "[admin]\ntoken_env = \"WSGATE_TEST_TOKEN\"\n", 1)
			}
			e, _ := reloadable(t, 2, cfg)
			p := e.srv.current().pools["relay"]
			node := e.addrs[0]
			n := p.Node(node)
			drained := func() bool { return p.CheckView(node).AdminDrain }
			generation := func() uint64 { return e.srv.current().n }
			endpoints := []struct {
				name, path, body string
				setup            func() // the state before each request
				effect           func() bool
				want             int
			}{
				{"drain", "/api/pools/relay/nodes/" + node + "/drain?migrate=1", "",
					func() { e.srv.undrainNode(p, n) }, drained, 200},
				{"undrain", "/api/pools/relay/nodes/" + node + "/undrain", "",
					func() { e.srv.drainNode(p, n, false) }, func() bool { return !drained() }, 200},
				{"reload", "/api/reload", "", nil, nil, 200},
				{"revoke", "/api/revoke", `{"subject": "mallory", "ttl": "1s"}`, nil, nil, 200},
			}
			for _, ep := range endpoints {
				for _, sh := range crossSiteShapes {
					t.Run(ep.name+"/"+sh.name, func(t *testing.T) {
						if ep.setup != nil {
							ep.setup()
						}
						before := generation()
						code, body := e.send(http.MethodPost, ep.path, ep.body, sh.browserShape, token)
						if code != sh.want || !strings.Contains(body, sh.msg) {
							t.Fatalf("%d %s\nwant %d with %s", code, body, sh.want, sh.msg)
						}
						if ep.effect != nil && ep.effect() {
							t.Fatal("the refused request took effect")
						}
						if generation() != before {
							t.Fatal("the refused request reloaded the config")
						}
					})
				}
				for _, sh := range ownShapes {
					t.Run(ep.name+"/own/"+sh.name, func(t *testing.T) {
						if ep.setup != nil {
							ep.setup()
						}
						before := generation()
						code, body := e.send(http.MethodPost, ep.path, ep.body, sh, token)
						if code != ep.want {
							t.Fatalf("%d %s, want %d", code, body, ep.want)
						}
						if ep.effect != nil && !ep.effect() {
							t.Fatal("no effect")
						}
						if ep.name == "reload" && generation() != before+1 {
							t.Fatalf("generation %d after reload, was %d", generation(), before)
						}
					})
				}
			}
			e.srv.undrainNode(p, n)
		})
	}
}

// TestAdminChecksHostOnReads pins a DNS-rebinding page reading the admin
// API: with Host: evil.example it got the node list, the config and the
// metrics. Every admin request is now Host-checked, except liveness and
// readiness, which hold nothing and must answer any prober; an
// absolute-form request was checked by its Host header alone, not by the
// host its target names.
func TestAdminChecksHostOnReads(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	rebinding := browserShape{host: "evil.example:PORT", origin: "OWN"}
	for _, path := range []string{"/", "/api/nodes", "/api/config", "/api/reload", "/metrics", "/api/nope"} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			if code, body := e.send(method, path, "", rebinding, ""); code != 403 || (method == http.MethodGet && !strings.Contains(body, "admin.hosts")) {
				t.Errorf("%s %s with Host evil.example: %d %s, want 403", method, path, code, body)
			}
		}
		if code, body := e.send(http.MethodGet, path, "", browserShape{host: "localhost:PORT"}, ""); code == 403 {
			t.Errorf("GET %s with Host localhost: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := e.send(http.MethodGet, path, "", rebinding, ""); code != 200 {
			t.Errorf("GET %s with Host evil.example: %d %s, want 200 (probes)", path, code, body)
		}
	}
	// An absolute-form target names the host the request is for (RFC 9112
	// section 3.2.2): one that is not ours is refused whatever Host says,
	// and the other way round.
	admin := e.srv.AdminAddr().String()
	for _, req := range []string{
		"GET http://evil.example/api/config HTTP/1.1\r\nHost: " + admin + "\r\n\r\n",
		"GET http://" + admin + "/api/config HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"POST http://evil.example/api/reload HTTP/1.1\r\nHost: " + admin + "\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
	} {
		if code := rawExchange(t, admin, req); code != 403 {
			t.Errorf("%q: %d, want 403", req, code)
		}
	}
	// A read from another site's page is harmless (it cannot read the
	// answer) and is what some monitoring pages do.
	if code, body := e.send(http.MethodGet, "/api/nodes", "", browserShape{origin: "http://grafana.example"}, ""); code != 200 {
		t.Errorf("GET /api/nodes with a foreign Origin: %d %s", code, body)
	}
}

// TestRedactRequestFromParseErrorLog pins credentials written to the log:
// a request fasthttp could not parse was logged (at debug) with its first
// bytes, bearer token and query token included, on the client listener and
// on the admin one (whose token it is).
func TestRedactRequestFromParseErrorLog(t *testing.T) {
	var logs testproc.Buffer
	cfg, err := conf.Parse("log.toml", []byte(fmt.Sprintf(withAdmin, "127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:2")))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	for _, bad := range []string{
		"GET /room?access_token=query-secret HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer header-secret\r\nBad Name : x\r\n\r\n",
		"GET /room HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer value-secret\x01\r\n\r\n",
	} {
		for _, addr := range []string{srv.Addr().String(), srv.AdminAddr().String()} {
			if code := rawExchange(t, addr, bad); code != http.StatusBadRequest {
				t.Fatalf("malformed request to %s: %d, want 400", addr, code)
			}
		}
	}
	waitUntil(t, func() bool { return strings.Count(logs.String(), "error when reading request headers") >= 4 })
	if out := logs.String(); strings.Contains(out, "secret") {
		t.Fatalf("a credential from the request reached the log:\n%s", out)
	}
}
