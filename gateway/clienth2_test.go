package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Dial opens a TLS connection to the gateway's TLS listener offering
// h2 and http/1.1, checks that h2 was chosen, and starts HTTP/2 on it.
func h2Dial(t *testing.T, srv *Server, f *tlsFiles) *h2client.Conn {
	t.Helper()
	return h2DialAddr(t, srv.TLSAddr().String(), f)
}

// h2DialAddr is h2Dial to the TLS listener at addr.
func h2DialAddr(t *testing.T, addr string, f *tlsFiles) *h2client.Conn {
	t.Helper()
	cfg := f.clientConfig("gw.test")
	cfg.NextProtos = []string{"h2", "http/1.1"}
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		tc.Close()
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	hc, err := h2client.Handshake(tc, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	return hc
}

// h2Streams is the gateway's count of open client HTTP/2 streams.
func h2Streams(srv *Server) int64 { return srv.h2.Stats().Streams }

// waitH2Zero waits until the gateway's HTTP/2 server holds no connection
// and no stream.
func waitH2Zero(t *testing.T, srv *Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st := srv.h2.Stats(); st.Conns != 0 || st.Streams != 0; st = srv.h2.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("HTTP/2 still holds %d connections, %d streams", st.Conns, st.Streams)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// h2Frames are the frames of the goroutines client HTTP/2 and its
// tunnels run: a connection's reader and writer, a stream's handler, a
// tunnel's pumps (a TLS client's tunnel runs on goroutines).
var h2Frames = []string{"h2serve.(*conn).", "h2serve.(*Stream).run", "gateway.(*Server).serveStream", "tunnel.(*Tunnel).pump"}

// waitNoH2Goroutines waits until no goroutine runs client HTTP/2 or a
// tunnel. (The process's totals move with the relays' and the health
// checks' keep-alive connections; the connection slots, back to zero in
// waitZero, show the client sockets closed.)
func waitNoH2Goroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 4<<20)
	for {
		dump := string(buf[:runtime.Stack(buf, true)])
		left := ""
		for _, g := range strings.Split(dump, "\n\n") {
			for _, f := range h2Frames {
				if strings.Contains(g, f) {
					left += g + "\n\n"
					break
				}
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of client HTTP/2 or tunnels left:\n%s", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockedBuffer is a log sink safe for the gateway's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClientH2WebSocketsShareOneConnection opens WebSockets as extended CONNECT
// streams of one TLS connection whose ALPN chose h2, through the gateway
// to relays: each is admitted and counted as a tunnel (least connections
// spreads them over both relays), the four take four max_conns slots (the
// connection's covers its first stream, as an HTTP/1.1 connection carries
// one tunnel), the access log says HTTP/2.0, an HTTP/1.1 client still gets http/1.1 on
// the same listener, and every count returns to zero.
func TestClientH2WebSocketsShareOneConnection(t *testing.T) {
	f := newTLSFiles(t)
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	cfg := tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 8"), catchAll)
	cfg = strings.Replace(cfg, "  [[pools.nodes]]\n  addr = %[2]q\n", "  [[pools.nodes]]\n  addr = %[2]q\n  [[pools.nodes]]\n  addr = %[3]q\n", 1)
	cfg = strings.Replace(cfg, "[admin]", "[log]\naccess = true\n[admin]", 1)
	e := newEnvLog(t, 2, cfg, log)
	hc := h2Dial(t, e.srv, f)
	if s := hc.Settings(); s[http2.SettingMaxConcurrentStreams] != 8 || s[http2.SettingEnableConnectProtocol] != 1 {
		t.Fatalf("settings %v: want MAX_CONCURRENT_STREAMS 8 and ENABLE_CONNECT_PROTOCOL 1", s)
	}
	d := hc.Dialer(10 * time.Second)
	var conns []*websocket.Conn
	for range 4 {
		c, resp, err := d.Dial("ws://gw.test/room/h2?hello=1", nil)
		if err != nil {
			t.Fatalf("dial over h2: %v (%v)", err, resp)
		}
		conns = append(conns, c)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); err != nil { // hello
			t.Fatal(err)
		}
	}
	if n := e.srv.Tunnels(); n != 4 {
		t.Fatalf("%d tunnels, want 4", n)
	}
	if n := h2Streams(e.srv); n != 4 {
		t.Fatalf("%d h2 streams, want 4", n)
	}
	if n := e.srv.limits.Open(); n != 4 {
		t.Fatalf("%d connection slots held, want 4 (the connection's, and one for each stream beside the first)", n)
	}
	for _, p := range e.srv.current().pools {
		for _, n := range p.Balancer.Nodes() {
			if n.Live() != 2 {
				t.Errorf("node %s has %d tunnels, want 2 (least connections)", n.Addr(), n.Live())
			}
		}
	}
	// Frames both ways through a relay's room: a large one (many DATA
	// frames, more than a stream's window) and small ones.
	msg := strings.Repeat("h2-", 100000)
	if err := conns[0].WriteMessage(websocket.BinaryMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns[1:] {
		if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
			t.Fatalf("got %d bytes, %v", len(got), err)
		}
	}
	// An HTTP/1.1 client on the same listener.
	w, _, err := wssDial(e.srv.TLSAddr().String(), "/room/h2", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	for _, c := range conns {
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1000) {
			t.Errorf("close: %v", err)
		}
		_ = c.Close()
	}
	hc.Close()
	e.waitZero()
	waitH2Zero(t, e.srv)
	waitNoH2Goroutines(t)
	lines := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["kind"] != "tunnel" || m["proto"] != "HTTP/2.0" {
			continue
		}
		lines++
		if m["status"] != float64(200) || m["path"] != "/room/h2" {
			t.Errorf("access line %v: want status 200, path /room/h2", m)
		}
	}
	if lines != 4 {
		t.Errorf("%d tunnel lines with proto HTTP/2.0, want 4:\n%s", lines, logs.String())
	}
}

// TestClientH2Admission sends requests as HTTP/2 streams through the admission
// path HTTP/1.1 takes: no route, origin refused, a bad
// Sec-WebSocket-Version, a Sec-WebSocket-Key (RFC 8441 has none), another
// :protocol, a plain CONNECT, a plain request on a route that takes
// handshakes only and a header block over the limit are each answered on
// their stream, with the
// connection kept; a plain request on a route that takes it is proxied,
// and the node saw X-Forwarded-Proto https and the gateway's own key.
func TestClientH2Admission(t *testing.T) {
	f := newTLSFiles(t)
	back := newRecorder(t)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), `
[[routes]]
path_prefix = "/api/"
pool = "relay"
[[routes]]
path_prefix = "/ws/"
pool = "relay"
plain_http = "refuse"
origins = ["https://gw.test"]
`), "127.0.0.1:0", back.addr())
	srv := startGateway(t, cfg)
	hc := h2Dial(t, srv, f)
	connect := func(path, protocol string) []hpack.HeaderField {
		return []hpack.HeaderField{
			{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: protocol},
			{Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: path},
		}
	}
	get := func(path string) []hpack.HeaderField {
		return []hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: path},
		}
	}
	// The recording node's upgrader checks Origin against Host too.
	ws := http.Header{"Sec-Websocket-Version": {"13"}, "Origin": {"https://gw.test"}}
	with := func(k, v string) http.Header { h := ws.Clone(); h.Set(k, v); return h }
	for _, c := range []struct {
		name   string
		pseudo []hpack.HeaderField
		h      http.Header
		end    bool
		status int
	}{
		{"no route", connect("/none", "websocket"), ws, false, 404},
		{"origin refused", connect("/ws/x", "websocket"), with("Origin", "https://evil.test"), false, 403},
		{"version 8", connect("/ws/x", "websocket"), with("Sec-Websocket-Version", "8"), false, 400},
		// (h2client leaves a key out of the fields; it goes in by hand.)
		{"a key", append(connect("/ws/x", "websocket"), hpack.HeaderField{Name: "sec-websocket-key", Value: "dGhlIHNhbXBsZSBub25jZQ=="}), ws, false, 400},
		{"another protocol", connect("/ws/x", "other"), ws, false, 400},
		{"plain CONNECT", []hpack.HeaderField{{Name: ":method", Value: "CONNECT"}, {Name: ":authority", Value: "gw.test:443"}}, nil, false, 405},
		{"plain GET on a handshake route", get("/ws/x"), nil, true, 426},
		{"plain GET proxied", get("/api/x"), nil, true, 400}, // the recorder's upgrader refuses a GET
		// (One field over the limit would end the connection: see
		// h2serve's TestStreamErrors.)
		{"header block over 8 KiB", connect("/ws/x", "websocket"), http.Header{"X-1": {strings.Repeat("b", 3000)}, "X-2": {strings.Repeat("b", 3000)}, "X-3": {strings.Repeat("b", 3000)}}, false, 431},
		{"accepted", connect("/ws/x", "websocket"), ws, false, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := hc.OpenRequest(c.pseudo, c.h, c.end)
			if err != nil {
				t.Fatal(err)
			}
			status, h, body, err := s.Response(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if status != c.status {
				t.Fatalf("status %d (%s), want %d", status, body, c.status)
			}
			if status == 200 && h.Get("Sec-Websocket-Accept") != "" {
				t.Errorf("200 with Sec-WebSocket-Accept %q", h.Get("Sec-Websocket-Accept"))
			}
			_ = s.Close()
		})
	}
	hs := back.headers()
	last := hs[len(hs)-1]
	if last.Get("X-Forwarded-Proto") != "https" || len(last.Get("Sec-Websocket-Key")) != 24 || last.Get("Upgrade") != "websocket" {
		t.Errorf("the node's upgrade request: %v", last)
	}
	select {
	case <-hc.Done():
		t.Fatalf("the connection ended: %v", hc.Err())
	default:
	}
}

// TestClientH2DrainSends1001PerStream drains a gateway with WebSockets on two
// HTTP/2 connections: every stream gets 1001, each connection GOAWAY
// first (no stream opens behind the drain), and then closes; no
// goroutine of theirs is left.
func TestClientH2DrainSends1001PerStream(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	var conns []*websocket.Conn
	var hcs []*h2client.Conn
	for range 2 {
		hc := h2Dial(t, e.srv, f)
		hcs = append(hcs, hc)
		d := hc.Dialer(10 * time.Second)
		for range 3 {
			c, _, err := d.Dial("ws://gw.test/room/d", nil)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
	}
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(context.Background()) }()
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1001) {
			t.Errorf("want 1001, got %v", err)
		}
		_ = c.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, hc := range hcs {
		select {
		case <-hc.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("an HTTP/2 connection outlived the drain")
		}
		if g := hc.GoAways(); len(g) == 0 || g[0].Code != http2.ErrCodeNo {
			t.Errorf("GOAWAYs %v, want one with NO_ERROR", g)
		}
	}
	waitH2Zero(t, e.srv)
	e.waitZero()
	waitNoH2Goroutines(t)
}

// TestClientH2NodeJSErrors runs the error cases with Node.js's http2 client
// (testdata/h2errors.js) against a gateway with h2_max_streams = 2: a
// CONNECT without :protocol is answered 405; an extended CONNECT whose
// :path is not a path is reset (PROTOCOL_ERROR) before admission; a third
// stream while two are open is refused (REFUSED_STREAM); a WebSocket
// reset with half a frame written ends its tunnel, the relay loses its
// member, and every count (tunnels, streams, connections, slots, node
// leases) returns to zero.
func TestClientH2NodeJSErrors(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not installed: .ci/run installs Debian's nodejs")
	}
	f := newTLSFiles(t)
	caFile := filepath.Join(f.dir, "ca.pem")
	if err := os.WriteFile(caFile, f.ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 2"), catchAll))
	_, port, _ := net.SplitHostPort(e.srv.TLSAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "testdata/h2errors.js", port, caFile).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	t.Logf("node: %s", bytes.TrimSpace(out))
	type outcome struct {
		Status  int
		RstCode *int
	}
	var got struct {
		Settings struct {
			EnableConnectProtocol bool
			MaxConcurrentStreams  int
		}
		NoProtocol, BadPath outcome
		Reset               outcome
		TooMany             struct{ Third outcome }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %s: %v", out, err)
	}
	code := func(o outcome) int {
		if o.RstCode == nil {
			return -1
		}
		return *o.RstCode
	}
	switch {
	case !got.Settings.EnableConnectProtocol || got.Settings.MaxConcurrentStreams != 2:
		t.Errorf("settings %+v", got.Settings)
	case got.NoProtocol.Status != 405:
		t.Errorf("CONNECT without :protocol: %+v, want 405", got.NoProtocol)
	case got.BadPath.Status != 0 || code(got.BadPath) != int(http2.ErrCodeProtocol):
		t.Errorf("a bad :path: %+v, want RST_STREAM(PROTOCOL_ERROR)", got.BadPath)
	case got.Reset.Status != 200:
		t.Errorf("the WebSocket to reset: %+v, want 200", got.Reset)
	case got.TooMany.Third.Status != 0 || code(got.TooMany.Third) != int(http2.ErrCodeRefusedStream):
		t.Errorf("a third stream: %+v, want RST_STREAM(REFUSED_STREAM)", got.TooMany.Third)
	}
	waitH2Zero(t, e.srv)
	// The reset stream's tunnel ends too, and the relay loses its
	// member: the node's connection is closed once the close timeout
	// passes, since a close frame cannot follow half a frame (as when an
	// HTTP/1.1 client's connection breaks mid-frame).
	e.waitZero()
	waitNoH2Goroutines(t)
}

// TestClientH2SlowStreamDoesNotStallOthers pins flow control per stream on the
// client side: of four WebSockets on one HTTP/2 connection, one stops
// reading (it gives no window back) while a peer floods their room; the
// other three get every message, and the stalled one's tunnel is ended
// at write_timeout, its stream and node slot given back.
func TestClientH2SlowStreamDoesNotStallOthers(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig(`write_timeout = "1s"`, f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 4"), catchAll))
	hc := h2Dial(t, e.srv, f)
	d := hc.Dialer(10 * time.Second)
	var conns []*websocket.Conn
	for range 4 {
		c, _, err := d.Dial("ws://gw.test/room/slow", nil)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	h2client.StreamOf(conns[0]).Freeze(true)
	peer, _, err := wssDial(e.srv.TLSAddr().String(), "/room/slow", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	// 200 messages: fewer than the relay queues for a member before it
	// cuts it as a slow consumer (256), so only the gateway decides; 400
	// KiB, six times a stream's window.
	const n = 200
	msg := bytes.Repeat([]byte("s"), 2048)
	errs := make(chan error, 4)
	go func() {
		for range n {
			if err := peer.WriteMessage(websocket.BinaryMessage, msg); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	// The three read at once: one read after another, the later ones
	// would lag the relay's own slow-consumer limit.
	for i, c := range conns[1:] {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			for k := range n {
				if _, got, err := c.ReadMessage(); err != nil || len(got) != len(msg) {
					errs <- fmt.Errorf("reader %d: message %d: %d bytes, %w", i+1, k, len(got), err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 { // the peer and the three readers
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.Tunnels() != 4 || h2Streams(e.srv) != 3 { // three h2 tunnels and the peer's
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels, %d h2 streams: want the stalled one ended at write_timeout", e.srv.Tunnels(), h2Streams(e.srv))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	_ = peer.Close()
	hc.Close()
	waitH2Zero(t, e.srv)
	e.waitZero()
	waitNoH2Goroutines(t)
}

// TestClientH2TurnedOnByReload pins that gateway.tls.h2 applies at a reload:
// off, a client offering h2 gets http/1.1; after a reload that turns it
// on, a new connection gets h2 and its WebSocket streams, while a wss
// tunnel from before goes on; turned off again, new connections get
// http/1.1 and the HTTP/2 connection already up keeps working. A changed
// h2_max_streams is reported as needing a restart.
func TestClientH2TurnedOnByReload(t *testing.T) {
	f := newTLSFiles(t)
	tlsAddr := testproc.FreeAddr(t)
	cfgFmt := tlsGatewayConfig("", f.table(tlsAddr, "%[3]s"), catchAll)
	e := newEnv(t, 1, strings.Replace(cfgFmt, "%[3]s", "", 1))
	alpn := func() string {
		t.Helper()
		cfg := f.clientConfig("gw.test")
		cfg.NextProtos = []string{"h2", "http/1.1"}
		c, err := tls.Dial("tcp", tlsAddr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().NegotiatedProtocol
	}
	reload := func(extra string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "wsgate.toml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(cfgFmt, e.gw, e.addrs[0], extra)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := e.srv.ReloadFrom(path); err != nil {
			t.Fatal(err)
		}
	}
	if p := alpn(); p != "http/1.1" {
		t.Fatalf("h2 off: ALPN chose %q", p)
	}
	live, _, err := wssDial(tlsAddr, "/room/reload", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	reload("  h2 = true")
	hc := h2Dial(t, e.srv, f)
	ws, _, err := hc.Dialer(10*time.Second).Dial("ws://gw.test/room/reload", nil)
	if err != nil {
		t.Fatal(err)
	}
	reload("  h2 = false\n  h2_max_streams = 50")
	if st := e.srv.LastReload(); !slices.Contains(st.Restart, "gateway.tls.h2_max_streams") {
		t.Errorf("reload status %+v: want h2_max_streams to need a restart", st)
	}
	if p := alpn(); p != "http/1.1" {
		t.Fatalf("h2 off again: ALPN chose %q", p)
	}
	if err := live.WriteMessage(websocket.TextMessage, []byte("across")); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, got, err := ws.ReadMessage(); err != nil || string(got) != "across" {
		t.Fatalf("the h2 WebSocket after the reloads got %q, %v", got, err)
	}
	_ = ws.Close()
	_ = live.Close()
	hc.Close()
	waitH2Zero(t, e.srv)
	e.waitZero()
}

// TestClientH2Subprotocol opens WebSockets over HTTP/2 asking for the
// relay.v1 subprotocol, through a pool that reaches the relay over
// HTTP/1.1 and one that reaches it over HTTP/2: the client's 200 carries
// the subprotocol the relay chose, on both, and frames go through.
func TestClientH2Subprotocol(t *testing.T) {
	for _, proto := range []string{"http1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			f := newTLSFiles(t)
			cfg := tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll)
			cfg = strings.Replace(cfg, "name = \"relay\"\n", fmt.Sprintf("name = \"relay\"\nprotocol = %q\n", proto), 1)
			e := newEnv(t, 1, cfg)
			hc := h2Dial(t, e.srv, f)
			d := hc.Dialer(10 * time.Second)
			d.Subprotocols = []string{"relay.v1"}
			a, resp, err := d.Dial("ws://gw.test/room/sub", nil)
			if err != nil {
				t.Fatalf("dial: %v (%v)", err, resp)
			}
			if a.Subprotocol() != "relay.v1" {
				t.Fatalf("subprotocol %q, want relay.v1", a.Subprotocol())
			}
			b, _, err := hc.Dialer(10*time.Second).Dial("ws://gw.test/room/sub", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.WriteMessage(websocket.TextMessage, []byte("plain to v1")); err != nil {
				t.Fatal(err)
			}
			_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, got, err := a.ReadMessage(); err != nil || len(got) == 0 {
				t.Fatalf("the relay.v1 member got %q, %v", got, err)
			}
			_ = a.Close()
			_ = b.Close()
			hc.Close()
			waitH2Zero(t, e.srv)
			e.waitZero()
		})
	}
}

// TestClientH2NodeCapAndOverflow pins that each stream takes a node slot as an
// HTTP/1.1 WebSocket does: with max_conns_per_node = 2, a third stream
// on the same connection is answered 503 with Retry-After on its stream,
// or, on a close-1013 route, accepted with 200 and closed at once with
// 1013; once a stream ends, its slot takes a new one. It waits for the
// slot itself (the node's live count), not for the tunnel count, which
// reads 1 too while the second stream's tunnel, answered 200 before it
// is registered, is not yet counted and the first still holds its slot
// (the freed slot's dial then failed with 503 on a loaded machine).
func TestClientH2NodeCapAndOverflow(t *testing.T) {
	f := newTLSFiles(t)
	cfg := tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), `
[[routes]]
path_prefix = "/room/soft-"
pool = "relay"
overflow = "close-1013"
[[routes]]
path_prefix = "/"
pool = "relay"
`)
	cfg = strings.Replace(cfg, "name = \"relay\"\n", "name = \"relay\"\nmax_conns_per_node = 2\n", 1)
	e := newEnv(t, 1, cfg)
	hc := h2Dial(t, e.srv, f)
	d := hc.Dialer(10 * time.Second)
	a, _, err := d.Dial("ws://gw.test/room/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := d.Dial("ws://gw.test/room/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := d.Dial("ws://gw.test/room/x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %v %+v", err, resp)
	}
	c, _, err := d.Dial("ws://gw.test/room/soft-1", nil)
	if err != nil {
		t.Fatalf("a close-1013 route accepts the stream: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1013) {
		t.Fatalf("want close 1013, got %v", err)
	}
	_ = c.Close()
	_ = a.Close()
	// The slot is free once the node's live count is down to b's lease.
	node := e.srv.current().pools["relay"].Balancer.Nodes()[0]
	waitFor := time.Now().Add(10 * time.Second)
	for node.Live() != 1 {
		if time.Now().After(waitFor) {
			t.Fatalf("the node holds %d leases after one stream closed, want 1", node.Live())
		}
		time.Sleep(5 * time.Millisecond)
	}
	n, resp, err := d.Dial("ws://gw.test/room/x", nil)
	if err != nil {
		t.Fatalf("the freed slot: %v (%v)", err, resp)
	}
	_ = n.Close()
	_ = b.Close()
	hc.Close()
	waitH2Zero(t, e.srv)
	e.waitZero()
	waitNoH2Goroutines(t)
}

// TestClientH2RapidResetBoundsAdmission pins the rapid reset bound through the
// auth chain (CVE-2023-44487): a client opens 100 streams whose auth
// plugin call takes 1 s (under the plugin timeout, 2 s) and resets each
// at once; with h2_max_streams = 4 at most 4 are admitted at a time, so
// the plugin is called 4 times, not 100, the rest refused with
// REFUSED_STREAM. The next WebSocket gets in, and its plugin call, the
// fifth, saw the request with ALPN h2.
func TestClientH2RapidResetBoundsAdmission(t *testing.T) {
	f := newTLSFiles(t)
	back := newRecorder(t)
	plugin := testproc.Build(t, "./plugins/internal/testplugin")
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 4"), `
[[routes]]
pool = "relay"
auth = ["t"]
[[plugins]]
name = "t"
path = %[3]q
  [plugins.config]
  tag = "h2"
  slow_for = "1s"
`), "127.0.0.1:0", back.addr(), plugin)
	var logs lockedBuffer
	srv := startGatewayLog(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	hc := h2Dial(t, srv, f)
	pseudo := []hpack.HeaderField{{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: "websocket"},
		{Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/slow"}}
	const burst = 100
	for range burst {
		s, err := hc.OpenRequest(pseudo, http.Header{"Sec-Websocket-Version": {"13"}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for st := srv.h2.Stats(); st.Opened+st.Refused < burst || st.Streams != 0; st = srv.h2.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("HTTP/2 %+v after the burst", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := srv.h2.Stats(); st.Opened != 4 || st.Refused != burst-4 {
		t.Fatalf("HTTP/2 %+v: want 4 streams admitted, %d refused", st, burst-4)
	}
	// The four admissions finish (their plugin calls return); then a
	// WebSocket on the same connection gets in.
	var ws *websocket.Conn
	for try := 0; ws == nil; try++ {
		c, resp, err := hc.Dialer(10*time.Second).Dial("ws://gw.test/room/x", nil)
		switch {
		case err == nil:
			ws = c
		case try == 200 || !strings.Contains(err.Error(), "REFUSED_STREAM"):
			if resp != nil {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("no WebSocket after the burst: %v: %d %s", err, resp.StatusCode, body)
			}
			t.Fatalf("no WebSocket after the burst: %v", err)
		default:
			time.Sleep(50 * time.Millisecond) // refused while the four run
		}
	}
	defer ws.Close()
	hs := back.headers()
	h := hs[len(hs)-1]
	if h.Get("X-Calls") != "5" || h.Get("X-Tls-Alpn") != "h2" {
		t.Fatalf("the plugin's call count %q (want 5: the burst's 4, then this one), ALPN %q (want h2)", h.Get("X-Calls"), h.Get("X-Tls-Alpn"))
	}
}
