package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// env is an in-process gateway in front of in-process relays on one bus.
type env struct {
	t      *testing.T
	srv    *Server
	relays []*relay.Relay
	addrs  []string
	gw     string
}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newEnv starts n relays and a gateway whose config is cfgFmt with the
// gateway address, then each relay address, substituted (as %[1]s, %[2]s...).
func newEnv(t *testing.T, n int, cfgFmt string) *env {
	t.Helper()
	return newEnvLog(t, n, cfgFmt, quietLog())
}

// newEnvLog is newEnv with the gateway logging to log.
func newEnvLog(t *testing.T, n int, cfgFmt string, log *slog.Logger) *env {
	t.Helper()
	e := &env{t: t}
	mem := bus.NewMemory()
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r := relay.New(relay.Options{ID: fmt.Sprintf("relay-%d", i+1), Bus: mem.Endpoint(), Logger: quietLog()})
		go func() { _ = r.Serve(ln) }()
		e.relays = append(e.relays, r)
		e.addrs = append(e.addrs, ln.Addr().String())
	}
	args := []any{"127.0.0.1:0"}
	for _, a := range e.addrs {
		args = append(args, a)
	}
	cfg, err := conf.Parse("test.toml", []byte(fmt.Sprintf(cfgFmt, args...)))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("WSGATE_TUNNEL_ENGINE") == "goroutines" {
		// make test runs the HTTP/2 node tests again on the stream
		// engine, which carries them behind a TLS client.
		cfg.Gateway.TunnelEngine = "goroutines"
	}
	e.srv, err = New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	e.gw = e.srv.Addr().String()
	t.Cleanup(func() {
		_ = e.srv.Shutdown(context.Background())
		for _, r := range e.relays {
			_ = r.Close(context.Background())
		}
		_ = mem.Close()
	})
	return e
}

const twoNodes = `
[gateway]
listen = %[1]q
drain_window = "200ms"
drain_timeout = "5s"
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %[2]q
  [[pools.nodes]]
  addr = %[3]q
[[routes]]
path_prefix = "/"
pool = "relay"
`

func (e *env) dial(path string, h http.Header) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	return d.Dial("ws://"+e.gw+path, h)
}

func (e *env) mustDial(path string) *websocket.Conn {
	e.t.Helper()
	c, _, err := e.dial(path, nil)
	if err != nil {
		e.t.Fatalf("dial %s: %v", path, err)
	}
	return c
}

// waitZero waits until the gateway holds no tunnel, no node lease and no
// connection slot, and the relays hold no connection.
func (e *env) waitZero() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		held := e.srv.Tunnels() + int(e.srv.limits.Open())
		for _, p := range e.srv.current().pools {
			for _, n := range p.Balancer.Nodes() {
				held += n.Live()
			}
		}
		for _, r := range e.relays {
			held += r.Info().Connections
		}
		late := e.srv.switches.Waiting() // handshakes waiting for their hijack (upgrade.Switch.Run)
		held += late
		sockets := tunnel.NodeSockets() // node sockets not closed nor taken by a tunnel
		held += sockets
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("still held after the test: tunnels %d, slots %d, late handshakes %d, node sockets %d, total %d",
				e.srv.Tunnels(), e.srv.limits.Open(), late, sockets, held)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTunnelEchoesAcrossReplicas(t *testing.T) {
	e := newEnv(t, 2, twoNodes)
	a := e.mustDial("/room/r1?hello=1")
	b := e.mustDial("/room/r1?hello=1")
	for _, c := range []*websocket.Conn{a, b} {
		if _, _, err := c.ReadMessage(); err != nil { // hello
			t.Fatal(err)
		}
	}
	if e.relays[0].Info().Connections != 1 || e.relays[1].Info().Connections != 1 {
		t.Fatalf("least_conn did not split 1/1: %+v %+v", e.relays[0].Info(), e.relays[1].Info())
	}
	msg := strings.Repeat("payload-", 20000) // 160 KB, several reads
	if err := a.WriteMessage(websocket.BinaryMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, got, err := b.ReadMessage()
	if err != nil || typ != websocket.BinaryMessage || string(got) != msg {
		t.Fatalf("got type %d, %d bytes, err %v", typ, len(got), err)
	}
	_ = a.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye"))
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := a.ReadMessage(); !websocket.IsCloseError(err, 1000) {
		t.Fatalf("close reply: %v", err)
	}
	a.Close()
	b.Close()
	e.waitZero()
}

func TestHandshakeRejections(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith("max_conns_per_ip = 2", "", `
[[routes]]
path_prefix = "/room/locked-"
pool = "relay"
origins = ["https://app.example"]
[[routes]]
path_prefix = "/room/"
pool = "relay"
`))
	// One connection a request, each closed before the next one opens:
	// max_conns_per_ip = 2 counts idle keep-alive connections too, so
	// reused or lingering ones would turn a case's answer into 429.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string, hdr map[string]string) *http.Response {
		t.Helper()
		e.waitZero()
		req, _ := http.NewRequest(http.MethodGet, "http://"+e.gw+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	ws := map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket",
		"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range ws {
			m[a] = b
		}
		m[k] = v
		return m
	}
	cases := []struct {
		name string
		path string
		hdr  map[string]string
		want int
	}{
		{"no route", "/other", ws, http.StatusNotFound},
		{"bad key", "/room/a", with("Sec-WebSocket-Key", "short"), http.StatusBadRequest},
		{"old version", "/room/a", with("Sec-WebSocket-Version", "8"), http.StatusUpgradeRequired},
		{"origin not allowed", "/room/locked-1", with("Origin", "https://evil.example"), http.StatusForbidden},
		{"no origin on a route with origins", "/room/locked-1", ws, http.StatusForbidden},
		{"node refuses bad room id", "/room/bad%20id", ws, http.StatusBadRequest},
		{"plain request off every route", "/info", nil, http.StatusNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := get(tc.path, tc.hdr).StatusCode; got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("origin allowed", func(t *testing.T) {
		c, _, err := e.dial("/room/locked-1", http.Header{"Origin": {"https://app.example"}})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	t.Run("per-ip limit", func(t *testing.T) {
		e.waitZero() // the tunnels of the cases above free their slots
		a, b := e.mustDial("/room/x"), e.mustDial("/room/x")
		_, resp, err := e.dial("/room/x", nil)
		if err == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("third connection from one IP: %v %v", err, resp)
		}
		a.Close()
		b.Close()
	})
	e.waitZero()
}

func TestNodeCapAndOverflow(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith("", "max_conns_per_node = 2", `
[[routes]]
path_prefix = "/room/soft-"
pool = "relay"
overflow = "close-1013"
[[routes]]
path_prefix = "/"
pool = "relay"
`))
	a, b := e.mustDial("/room/x"), e.mustDial("/room/x")
	_, resp, err := e.dial("/room/x", nil)
	if err == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %v %+v", err, resp)
	}
	c, _, err := e.dial("/room/soft-1", nil)
	if err != nil {
		t.Fatalf("close-1013 route must accept the upgrade: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1013) {
		t.Fatalf("want close 1013, got %v", err)
	}
	c.Close()
	a.Close()
	b.Close()
	e.waitZero()
	// The cap frees up: a new client gets in.
	e.mustDial("/room/x").Close()
	e.waitZero()
}

func TestUnreachableNodesGive502(t *testing.T) {
	dead := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	e := newEnv(t, 0, `
[gateway]
listen = %[1]q
[admin]
listen = ""
[[pools]]
name = "relay"
connect_tries = 2
  [[pools.nodes]]
  addr = "`+dead()+`"
  [[pools.nodes]]
  addr = "`+dead()+`"
[[routes]]
pool = "relay"
`)
	_, resp, err := e.dial("/room/x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("want 502, got %v %+v", err, resp)
	}
	e.waitZero()
}

// oneNodeWith is a newEnv config with one relay node: gateway, pool and
// routes add lines to those sections ("" routes = one catch-all route).
func oneNodeWith(gateway, pool, routes string) string {
	if routes == "" {
		routes = "[[routes]]\npool = \"relay\"\n"
	}
	return "[gateway]\nlisten = %[1]q\n" + gateway + "\n[admin]\nlisten = \"\"\n" +
		"[[pools]]\nname = \"relay\"\n" + pool + "\n  [[pools.nodes]]\n  addr = %[2]q\n" + routes
}

// withAdminListen turns on the admin listener (on a free loopback port) of a
// config from oneNodeWith.
func withAdminListen(cfg string) string {
	return strings.Replace(cfg, "[admin]\nlisten = \"\"\n", "[admin]\nlisten = \"127.0.0.1:0\"\n", 1)
}

// oneNode is a gateway with one relay node and a catch-all route.
var oneNode = oneNodeWith("", "", "")

func TestNodeGoneGives1012(t *testing.T) {
	e := newEnv(t, 1, oneNode)
	c := e.mustDial("/room/x")
	// Cut the relay's side without a close frame.
	_ = e.relays[0].Close(context.Background())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := c.ReadMessage()
	if !websocket.IsCloseError(err, 1012, 1001) {
		t.Fatalf("want close 1012 (or the relay's own 1001), got %v", err)
	}
	c.Close()
	e.waitZero()
}

func TestPlainHTTPProxied(t *testing.T) {
	e := newEnv(t, 1, oneNode)
	resp, err := http.Get("http://" + e.gw + "/info")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"connections"`) {
		t.Fatalf("GET /info through the gateway: %d %s", resp.StatusCode, body)
	}
	http.DefaultClient.CloseIdleConnections() // a keep-alive connection holds its slot
	e.waitZero()
}

// TestShutdownClosesWith1001 drains a gateway holding tunnels and checks
// every client sees 1001, the relays end empty and the goroutines return.
func TestShutdownClosesWith1001(t *testing.T) {
	base := runtime.NumGoroutine()
	e := newEnv(t, 2, twoNodes)
	var conns []*websocket.Conn
	for i := range 20 {
		conns = append(conns, e.mustDial(fmt.Sprintf("/room/r%d", i%3)))
	}
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(context.Background()) }()
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1001) {
			t.Errorf("want 1001, got %v", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	e.waitZero()
	for _, r := range e.relays {
		_ = r.Close(context.Background())
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base+5 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines %d, base %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientGoneMidHandshake pins that a client that vanishes while the
// gateway talks to the node leaves nothing held: the node slot, the
// gateway slot and the node's connection are all released.
func TestClientGoneMidHandshake(t *testing.T) {
	e := newEnv(t, 1, oneNode)
	req := "GET /room/gone HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	for range 50 {
		c, err := net.Dial("tcp", e.gw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	e.waitZero()
}

// TestSilentNodeTimesOut pins connect_timeout: a node that accepts but never
// answers the upgrade costs one timeout, then the client gets 502.
func TestSilentNodeTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	e := newEnv(t, 0, `
[gateway]
listen = %[1]q
[admin]
listen = ""
[[pools]]
name = "relay"
connect_timeout = "200ms"
connect_tries = 1
  [[pools.nodes]]
  addr = "`+ln.Addr().String()+`"
[[routes]]
pool = "relay"
`)
	_, resp, err := e.dial("/room/x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("want 502, got %v %+v", err, resp)
	}
	if got := e.srv.metrics.HandshakeCounts()["upstream_error"]; got != 1 {
		t.Fatalf("upstream_error handshakes = %d, want 1", got)
	}
	e.waitZero()
}

// TestGatewayLimits hits the gateway-wide max_conns (503 + Retry-After) and
// a route's max_frame (close 1009).
func TestGatewayLimits(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith("max_conns = 2", "", "[[routes]]\npool = \"relay\"\nmax_frame = \"1KiB\"\n"))
	a, b := e.mustDial("/room/lim"), e.mustDial("/room/lim")
	_, resp, err := e.dial("/room/lim", nil)
	if err == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third connection over max_conns=2: %v %+v", err, resp)
	}
	if err := a.WriteMessage(websocket.BinaryMessage, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteMessage(websocket.BinaryMessage, make([]byte, 1025)); err != nil {
		t.Fatal(err)
	}
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := a.ReadMessage()
		if err == nil {
			continue
		}
		if !websocket.IsCloseError(err, 1009) {
			t.Fatalf("frame over max_frame: %v, want close 1009", err)
		}
		break
	}
	a.Close()
	b.Close()
	e.waitZero()
}

// TestSlowHandshakeCut pins handshake_timeout: a client that never finishes
// its upgrade request is disconnected, holding nothing.
func TestSlowHandshakeCut(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith(`handshake_timeout = "200ms"`, "", ""))
	c, err := net.Dial("tcp", e.gw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /room/slow HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("want the gateway to close the connection, got %v", err)
	}
	e.waitZero()
}

// TestReusePortSharesOnePort runs two gateways on one port with
// reuse_port: both start, and the kernel hands each some of the clients.
func TestReusePortSharesOnePort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().String()
	ln.Close()
	cfg := `
[gateway]
listen = "` + port + `"
reuse_port = true
drain_window = "100ms"
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %[2]q
[[routes]]
pool = "relay"
# %[1]s
`
	a := newEnv(t, 1, cfg)
	b := newEnv(t, 1, cfg)
	var conns []*websocket.Conn
	for range 40 {
		conns = append(conns, a.mustDial("/room/shared"))
	}
	// A tunnel is registered just after its 101 went out: wait for all.
	waitUntil(t, func() bool { return a.srv.Tunnels()+b.srv.Tunnels() == 40 })
	if a.srv.Tunnels() == 0 || b.srv.Tunnels() == 0 {
		t.Fatalf("tunnels %d and %d, want both > 0 and 40 in all", a.srv.Tunnels(), b.srv.Tunnels())
	}
	for _, c := range conns {
		c.Close()
	}
	a.waitZero()
	b.waitZero()
}
