package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
	"github.com/wsgate/wsgate/internal/fastlog"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// startStdNode runs the h2 package's interop node, a WebSocket node on
// Go's standard library alone (net/http's cleartext HTTP/2 server with
// extended CONNECT), and returns it with its address once it accepts.
func startStdNode(t *testing.T, args ...string) (*testproc.Proc, string) {
	t.Helper()
	addr := testproc.FreeAddr(t)
	p := execStdNode(t, addr, args...)
	testproc.WaitHTTP(t, "http://"+addr+"/healthz", http.StatusOK, 10*time.Second)
	return p, addr
}

// execStdNode starts the interop node on addr with args, not waiting
// for it.
func execStdNode(t *testing.T, addr string, args ...string) *testproc.Proc {
	t.Helper()
	bin := testproc.Build(t, "./gateway/internal/upstream/h2/internal/stdnode")
	cmd := exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	// net/http reads http2xconnect once, at init, from its environment.
	cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
	return testproc.StartCmd(t, "stdnode", cmd)
}

// h2Pool is a gateway config with one "h2" pool of the nodes at addrs,
// with pool's extra lines.
func h2Pool(pool string, addrs ...string) string {
	return poolConf("protocol = \"h2\"\n"+pool, addrs...)
}

// poolConf is a gateway config with one pool "relay" of the nodes at
// addrs, with pool's lines, and a catch-all route to it.
func poolConf(pool string, addrs ...string) string {
	var nodes strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&nodes, "  [[pools.nodes]]\n  addr = %q\n", a)
	}
	return `
[gateway]
listen = %[1]q
drain_window = "100ms"
drain_timeout = "5s"
[admin]
listen = ""
[[pools]]
name = "relay"
` + pool + "\n" + nodes.String() + `
[[routes]]
pool = "relay"
`
}

// h2Set is the gateway's HTTP/2 connections to its pool's node addr.
func (e *env) h2Set(addr string) *h2.Set {
	e.t.Helper()
	p := e.srv.current().pools["relay"]
	s := p.H2[p.Node(addr)]
	if s == nil {
		e.t.Fatalf("no HTTP/2 set for %s", addr)
	}
	return s
}

// waitStreams waits until the set carries want streams.
func waitStreams(t *testing.T, s *h2.Set, want int) {
	t.Helper()
	var st h2.SetStats
	for range 1000 {
		if st = s.Stats(); st.Streams == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("set holds %+v, want %d streams", st, want)
}

// TestH2NodeEcho carries many clients' WebSockets as streams of two
// HTTP/2 connections to a node built on net/http: each echoes, gets the
// subprotocol the node chose and the node's own fields in its 101, and
// the node saw the client's Origin and version but no key (RFC 8441
// section 5). Closing the clients ends their streams, and the
// connections stay for the next ones.
func TestH2NodeEcho(t *testing.T) {
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_connections = 2", addr))
	const n = 20
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		h := http.Header{"Origin": {"https://app.test"}, "Sec-WebSocket-Protocol": {"chat, other"}}
		c, resp, err := e.dial("/ws", h)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != "chat" {
			t.Errorf("subprotocol %q, want chat", got)
		}
		if o, v, k := resp.Header.Get("X-Seen-Origin"), resp.Header.Get("X-Seen-Version"), resp.Header.Get("X-Seen-Key"); o != "https://app.test" || v != "13" || k != "" {
			t.Errorf("the node saw Origin %q, version %q, key %q", o, v, k)
		}
		conns[i] = c
	}
	s := e.h2Set(addr)
	if st := s.Stats(); st.Conns != 2 || st.Streams != n {
		t.Errorf("set %+v, want 2 connections carrying %d streams", st, n)
	}
	if s.Size != 2 || s.PingInterval != 10*time.Second || s.Config.WriteTimeout != e.srv.current().cfg.Gateway.WriteTimeout.Duration {
		t.Errorf("set of size %d, ping interval %v, write timeout %v: not the config's", s.Size, s.PingInterval, s.Config.WriteTimeout)
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			for j := range 20 {
				msg := strings.Repeat(fmt.Sprintf("%d-%d.", i, j), 1+j*50)
				if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					t.Errorf("client %d: write: %v", i, err)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, got, err := c.ReadMessage()
				if err != nil || string(got) != msg {
					t.Errorf("client %d: read %d bytes, %v", i, len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, c := range conns {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""), time.Now().Add(5*time.Second))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1000) {
			t.Errorf("close: %v", err)
		}
		c.Close()
	}
	e.waitZero()
	waitStreams(t, s, 0)
	if st := s.Stats(); st.Conns != 2 {
		t.Errorf("set %+v after the clients left: the connections must stay", st)
	}
	e.mustDial("/ws").Close()
	if st := s.Stats(); st.Conns != 2 {
		t.Errorf("set %+v: a new client must reuse a connection", st)
	}
	e.waitZero()
}

// TestH2NodeAnswers passes a node's 403 and its body to the client, and
// counts a 404 as the node's answer too; neither holds a stream.
func TestH2NodeAnswers(t *testing.T) {
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_ping_interval = \"3s\"", addr))
	// h2_connections = 0: one per poller (the pollers the config will
	// start when none runs yet).
	if s, want := e.h2Set(addr), h2Connections(e.srv.current().cfg, &e.srv.current().cfg.Pools[0]); s.Size != want || want < 1 || s.PingInterval != 3*time.Second {
		t.Errorf("set of size %d (want %d), ping interval %v (want 3s)", s.Size, want, s.PingInterval)
	}
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{{"/deny", 403, "denied by the node"}, {"/nowhere", 404, "not found"}} {
		_, resp, err := e.dial(c.path, nil)
		if err == nil || resp == nil || resp.StatusCode != c.status {
			t.Fatalf("%s: %v %+v", c.path, err, resp)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), c.body) {
			t.Errorf("%s: body %q", c.path, body)
		}
	}
	waitStreams(t, e.h2Set(addr), 0)
	e.waitZero()
}

// TestH2NodeFails: a node's 5xx, and a node that does not speak HTTP/2
// with extended CONNECT (here an HTTP/1.1 relay), fail the handshake as
// an unreachable node does: 502 once every try failed.
func TestH2NodeFails(t *testing.T) {
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("connect_tries = 2", addr))
	_, resp, err := e.dial("/fail", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a node's 500: %v %+v, want 502", err, resp)
	}
	waitStreams(t, e.h2Set(addr), 0)
	e.waitZero()

	// A node that speaks only HTTP/1.1 (relay-backend speaks HTTP/2 too):
	// fasthttp answers the HTTP/2 preface with an error and closes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Its error about the preface goes where the gateway's own fasthttp
	// errors go (fastlog), here a quiet log: not to the test's output.
	h1 := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusNotFound) },
		Logger: fastlog.Logger{Log: quietLog()}}
	go func() { _ = h1.Serve(ln) }()
	t.Cleanup(func() { _ = h1.Shutdown() })
	e = newEnv(t, 0, h2Pool("", ln.Addr().String()))
	_, resp, err = e.dial("/room/x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("an HTTP/1.1 node: %v %+v, want 502", err, resp)
	}
	e.waitZero()
}

// TestH2StreamRejected: a node that resets a handshake's stream rejected
// that request: the client gets 502 and the node's health is untouched
// (with eject_after = 1, one failure reported would eject it), so a
// client cannot take nodes out with requests they reject.
func TestH2StreamRejected(t *testing.T) {
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("[pools.health]\neject_after = 1", addr))
	for range 3 {
		_, resp, err := e.dial("/reject", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("a reset stream: %v %+v, want 502", err, resp)
		}
	}
	c := e.mustDial("/ws")
	echoOnce(t, c, "the node is still in")
	c.Close()
	e.waitZero()
}

// TestH2FrozenClient: one client that never reads, on the HTTP/2
// connection the others share, stops only its own stream; the others
// echo everything. Its receive buffer is small and it sends 64 MiB, so
// that the node's echo handler blocks on its stream and stops reading
// that stream's body: net/http then gives the connection's window back
// no more for it, and only h2.Config.StreamSendLimit keeps the stream
// from taking the whole window (before it, every other client stalled
// until the frozen tunnel's write_timeout).
func TestH2FrozenClient(t *testing.T) {
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_connections = 1", addr))
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		nd := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		return nd.DialContext(ctx, network, a)
	}}
	frozen, _, err := d.Dial("ws://"+e.gw+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		msg := make([]byte, 64<<10)
		for range 1024 {
			_ = frozen.SetWriteDeadline(time.Now().Add(60 * time.Second))
			if err := frozen.WriteMessage(websocket.BinaryMessage, msg); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	time.Sleep(2 * time.Second) // the frozen stream's buffers fill
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			c, _, err := e.dial("/ws", nil)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer c.Close()
			for j := range 50 {
				msg := strings.Repeat(fmt.Sprint(i, ".", j, " "), 100)
				if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					t.Errorf("client %d: write: %v", i, err)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
					t.Errorf("client %d: message %d: %d bytes, %v", i, j, len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := e.h2Set(addr).Stats(); st.Conns != 1 {
		t.Errorf("set %+v, want every stream on one connection", st)
	}
	frozen.Close()
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatal("the frozen client's writer never returned")
	}
	e.waitZero()
}

// TestH2NodeKilled gives every client of a node whose process dies close
// 1012, as a vanished HTTP/1.1 node does; the next client after the node
// is back gets a new connection.
func TestH2NodeKilled(t *testing.T) {
	p, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_connections = 1", addr))
	var conns []*websocket.Conn
	for range 5 {
		conns = append(conns, e.mustDial("/ws"))
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1012) {
			t.Errorf("want close 1012, got %v", err)
		}
		c.Close()
	}
	e.waitZero()
	startNodeAgain(t, addr)
	c := e.mustDial("/ws")
	echoOnce(t, c, "back")
	c.Close()
	e.waitZero()
}

// startNodeAgain starts a stdnode on addr, where one ran before.
func startNodeAgain(t *testing.T, addr string) *testproc.Proc {
	t.Helper()
	p := execStdNode(t, addr)
	testproc.WaitHTTP(t, "http://"+addr+"/healthz", http.StatusOK, 10*time.Second)
	return p
}

func echoOnce(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
		t.Fatalf("echo: %q %v", got, err)
	}
}

// TestH2NodeGoAway: a node that shuts down gracefully sends GOAWAY: its
// open streams go on until the node ends them, and no new stream goes to
// it (another node takes the next client).
func TestH2NodeGoAway(t *testing.T) {
	p, a := startStdNode(t)
	_, b := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_connections = 1\nbalance = \"round_robin\"", a, b))
	first := []*websocket.Conn{e.mustDial("/ws"), e.mustDial("/ws")}
	sa := e.h2Set(a)
	if st := sa.Stats(); st.Streams != 1 {
		t.Fatalf("node a carries %+v, want 1 stream", st)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// net/http's Shutdown sends GOAWAY, then waits for the streams.
	for range 1000 {
		if sa.Stats().Conns == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := sa.Stats(); st.Conns != 0 {
		t.Fatalf("node a's connection still takes streams after its GOAWAY: %+v", st)
	}
	for i, c := range first {
		echoOnce(t, c, fmt.Sprint("still here ", i))
	}
	for range 4 {
		c := e.mustDial("/ws")
		echoOnce(t, c, "new")
		c.Close()
	}
	for _, c := range first {
		c.Close()
	}
	if code, err := p.Wait(10 * time.Second); err != nil || code != 0 {
		t.Errorf("node a exit %d %v", code, err)
	}
	e.waitZero()
}

// TestH2Metrics: wsgate_upstream_h2_connections shows a node's open
// connections, then, after the node's GOAWAY, the same ones closing until
// their streams end.
func TestH2Metrics(t *testing.T) {
	p, addr := startStdNode(t)
	e := newEnv(t, 0, strings.Replace(h2Pool("h2_connections = 2", addr), "[admin]\nlisten = \"\"", "[admin]\nlisten = \"127.0.0.1:0\"", 1))
	var conns []*websocket.Conn
	for range 3 {
		conns = append(conns, e.mustDial("/ws"))
	}
	e.waitH2Gauge(addr, 2, 0)
	// Tunnels to an HTTP/2 node run on the pollers, unless the test run
	// asks for the goroutine engine.
	engine := "epoll"
	if os.Getenv("WSGATE_TUNNEL_ENGINE") == "goroutines" {
		engine = "goroutines"
	}
	for _, m := range e.scrape()["wsgate_tunnels_started_total"].GetMetric() {
		if m.GetLabel()[0].GetValue() == engine && m.GetCounter().GetValue() != 3 {
			t.Errorf("wsgate_tunnels_started_total{engine=%q} = %v, want 3", engine, m.GetCounter().GetValue())
		}
	}
	// ... and so do the connections' reads (see h2.Poller).
	if st, want := e.h2Set(addr).Stats(), map[string]int{"epoll": 2, "goroutines": 0}[engine]; st.Polled != want {
		t.Errorf("%d of %d connections read by a poller, want %d", st.Polled, st.Conns, want)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e.waitH2Gauge(addr, 0, 2)
	for _, c := range conns {
		c.Close()
	}
	e.waitH2Gauge(addr, 0, 0)
	e.waitZero()
}

// waitH2Gauge scrapes until wsgate_upstream_h2_connections of node reads
// open and closing, for at most 10s.
func (e *env) waitH2Gauge(node string, open, closing float64) {
	e.t.Helper()
	var got map[string]float64
	for range 500 {
		got = map[string]float64{}
		for _, m := range e.scrape()["wsgate_upstream_h2_connections"].GetMetric() {
			var n, st string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "node":
					n = l.GetValue()
				case "state":
					st = l.GetValue()
				}
			}
			if n == node {
				got[st] = m.GetGauge().GetValue()
			}
		}
		if got["open"] == open && got["closing"] == closing && len(got) == 2 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("wsgate_upstream_h2_connections of %s: %v, want open %v, closing %v", node, got, open, closing)
}

// TestH2StreamsCountAgainstCap: max_conns_per_node counts streams.
func TestH2StreamsCountAgainstCap(t *testing.T) {
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("max_conns_per_node = 2", addr))
	a, b := e.mustDial("/ws"), e.mustDial("/ws")
	_, resp, err := e.dial("/ws", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("over the cap: %v %+v", err, resp)
	}
	a.Close()
	b.Close()
	e.waitZero()
	e.mustDial("/ws").Close()
	e.waitZero()
}

// TestH2GatewayDrain closes every stream's client with 1001 on the
// gateway's shutdown, and the node's connections close after them.
func TestH2GatewayDrain(t *testing.T) {
	_, addr := startStdNode(t)
	goroutines, fds, pollers := runtime.NumGoroutine(), openFDs(t), tunnel.Pollers()
	e := newEnv(t, 0, h2Pool("", addr))
	var conns []*websocket.Conn
	for range 10 {
		conns = append(conns, e.mustDial("/ws"))
	}
	s := e.h2Set(addr)
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(context.Background()) }()
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err := c.ReadMessage()
		if !websocket.IsCloseError(err, 1001) {
			t.Errorf("want close 1001, got %v", err)
		}
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1001, ""), time.Now().Add(time.Second))
		c.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitSetEmpty(t, s)
	// The sets' goroutines (reader, keepalive, retirement) and sockets
	// are gone with them. (Pollers started by this test keep their epoll
	// descriptor and eventfd for the process's life.)
	fds += 2 * (tunnel.Pollers() - pollers)
	var g, n int
	for range 1000 {
		if g, n = runtime.NumGoroutine(), openFDs(t); g <= goroutines+5 && n <= fds+2 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("goroutines %d (before %d), descriptors %d (before %d)", g, goroutines, n, fds)
}

// TestH2ReloadKeepsConnections: a reload that keeps the pool's settings
// keeps its connections and the streams on them; one that changes
// h2_connections gives the node new ones for new clients, and the old
// connection closes once its stream ends.
func TestH2ReloadKeepsConnections(t *testing.T) {
	_, addr := startStdNode(t)
	cfg := h2Pool("h2_connections = 1", addr)
	e := newEnv(t, 0, cfg)
	c := e.mustDial("/ws")
	s := e.h2Set(addr)
	reload := func(text string) {
		t.Helper()
		cf, err := conf.Parse("h2.toml", []byte(fmt.Sprintf(text, e.gw)))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.srv.Apply(cf); err != nil {
			t.Fatal(err)
		}
	}
	reload(strings.Replace(cfg, "[[routes]]", "[[routes]]\nmax_frame = 1024", 1))
	if e.h2Set(addr) != s {
		t.Fatal("a reload that keeps the pool's settings replaced its connections")
	}
	echoOnce(t, c, "kept")
	reload(strings.Replace(cfg, "h2_connections = 1", "h2_connections = 2", 1))
	s2 := e.h2Set(addr)
	if s2 == s {
		t.Fatal("h2_connections changed but the set was kept")
	}
	echoOnce(t, c, "still kept")
	d := e.mustDial("/ws")
	echoOnce(t, d, "new")
	if st := s2.Stats(); st.Streams != 1 {
		t.Errorf("new set %+v, want the new client's stream", st)
	}
	c.Close()
	d.Close()
	e.waitZero()
	waitStreams(t, s, 0)
	waitSetEmpty(t, s)
}

// waitSetEmpty waits until s holds no connection, open or closing.
func waitSetEmpty(t *testing.T, s *h2.Set) {
	t.Helper()
	var st h2.SetStats
	for range 1000 {
		if st = s.Stats(); st == (h2.SetStats{}) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the set still holds %+v", st)
}

// TestH2PerStream runs the per-tunnel features on streams that share one
// HTTP/2 connection per node: a frame over max_frame ends its own client
// with 1009, a flood over frame_rate its own with 1008, keepalive pings
// reach a reading client and keep it, and a migrate drain of one node
// gives its clients 1001 while the other node's clients, and the other
// streams of the drained node's connection until then, go on.
func TestH2PerStream(t *testing.T) {
	_, a := startStdNode(t)
	_, b := startStdNode(t)
	cfg := strings.Replace(h2Pool("h2_connections = 1\nbalance = \"round_robin\"", a, b), "[admin]\nlisten = \"\"", "[admin]\nlisten = \"127.0.0.1:0\"", 1)
	cfg = strings.Replace(cfg, "[[routes]]\npool = \"relay\"\n", `[[routes]]
path_prefix = "/ws/limited"
pool = "relay"
max_frame = "1KiB"
frame_rate = 20
[[routes]]
path_prefix = "/"
pool = "relay"
ping_interval = "1s"
pong_timeout = "5s"
`, 1)
	e := newEnv(t, 0, cfg)
	// Four clients on each node (round robin), on one connection each.
	var onA, onB []*websocket.Conn
	for i := range 8 {
		c := e.mustDial("/ws/plain")
		if i%2 == 0 {
			onA = append(onA, c)
		} else {
			onB = append(onB, c)
		}
	}
	if sa, sb := e.h2Set(a).Stats(), e.h2Set(b).Stats(); sa.Streams != 4 || sb.Streams != 4 {
		t.Fatalf("streams per node: a %+v, b %+v", sa, sb)
	}

	big := e.mustDial("/ws/limited")
	if err := big.WriteMessage(websocket.BinaryMessage, make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	_ = big.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := big.ReadMessage(); !websocket.IsCloseError(err, 1009) {
		t.Errorf("a frame over max_frame: %v, want 1009", err)
	}
	big.Close()

	flood := e.mustDial("/ws/limited")
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = flood.WriteMessage(websocket.TextMessage, []byte("x"))
	}
	werr := err
	nread := 0
	_ = flood.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err = flood.ReadMessage(); err != nil {
			break
		}
		nread++
	}
	if !websocket.IsCloseError(err, 1008) {
		t.Errorf("a flood over frame_rate: %v, want 1008 (write err %v, read %d)", err, werr, nread)
	}
	flood.Close()

	// Keepalive: a client that reads (and so answers pings) for 2.5s
	// sees pings and stays.
	pings := 0
	onA[0].SetPingHandler(func(data string) error {
		pings++
		return onA[0].WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	_ = onA[0].SetReadDeadline(time.Now().Add(2500 * time.Millisecond))
	if _, _, err := onA[0].ReadMessage(); !isTimeout(err) {
		t.Fatalf("keepalive: %v", err)
	}
	if pings == 0 {
		t.Error("no keepalive ping reached the client")
	}
	onA[0].Close()
	onA = onA[1:]
	c := e.mustDial("/ws/plain") // the place onA[0] left, on a
	onA = append(onA, c)

	code, body := e.admin("POST", "/api/pools/relay/nodes/"+a+"/drain?migrate=1", "")
	if code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	for _, c := range onA {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err = c.ReadMessage(); err != nil {
				break
			}
		}
		if !websocket.IsCloseError(err, 1001) {
			t.Errorf("a client of the drained node: %v, want 1001", err)
		}
		c.Close()
	}
	for i, c := range onB {
		echoOnce(t, c, fmt.Sprint("b goes on ", i))
		c.Close()
	}
	e.waitZero()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestH2ThroughHAProxy runs the gateway's HTTP/2 client against a server
// we did not write: HAProxy with a cleartext HTTP front end (HTTP/2 found
// by its preface; it offers extended CONNECT, RFC 8441) in front of an
// HTTP/1.1 relay, to which
// HAProxy passes each stream as an HTTP/1.1 upgrade. Clients in one room
// exchange messages both ways, relay.v1 is negotiated end to end, and
// the relay's drain reaches every client as 1001.
func TestH2ThroughHAProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := relay.New(relay.Options{ID: "relay-1", Bus: bus.NewMemory().Endpoint(), Logger: quietLog(), DrainWindow: 200 * time.Millisecond})
	go func() { _ = r.Serve(ln) }()
	t.Cleanup(func() { _ = r.Close(context.Background()) })

	front := startHAProxy(t, ln.Addr().String())

	// HAProxy finds HTTP/2 by its preface: the gateway's HTTP/1.1
	// health probes pass through to the relay's /healthz.
	e := newEnv(t, 0, h2Pool("h2_connections = 1\n[pools.health]\ninterval = \"100ms\"\ntimeout = \"80ms\"", front))
	const n = 6
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		c, resp, err := e.dial("/room/h2-haproxy", http.Header{"Sec-WebSocket-Protocol": {relayclient.Subprotocol}})
		if err != nil {
			t.Fatalf("client %d: %v %+v", i, err, resp)
		}
		if c.Subprotocol() != relayclient.Subprotocol {
			t.Errorf("subprotocol %q, want %s", c.Subprotocol(), relayclient.Subprotocol)
		}
		conns[i] = c
	}
	if st := e.h2Set(front).Stats(); st.Conns != 1 || st.Streams != n {
		t.Errorf("set %+v, want %d streams on one connection", st, n)
	}
	waitUntil(t, func() bool { return r.Info().Connections == n })
	// Several probes have run: the node is up.
	time.Sleep(500 * time.Millisecond)
	if st := e.srv.current().pools["relay"].Node(front).State().String(); st != "up" {
		t.Errorf("node state %s after its health probes, want up", st)
	}
	// relay.v1: each client reads its join frames and then sees the
	// others' messages; count what the first client receives of the
	// rest's.
	for i, c := range conns[1:] {
		if err := c.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(`{"type":"msg","data":"from %d"}`, i+1))); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	_ = conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	for seen < n-1 {
		_, msg, err := conns[0].ReadMessage()
		if err != nil {
			t.Fatalf("client 0 after %d messages: %v", seen, err)
		}
		if strings.Contains(string(msg), "from ") {
			seen++
		}
	}
	if err := r.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err = c.ReadMessage(); err != nil {
				break
			}
		}
		if !websocket.IsCloseError(err, 1001) {
			t.Errorf("client %d: %v, want 1001 from the relay's drain", i, err)
		}
		c.Close()
	}
	e.waitZero()
}

// TestH2RequestTooLarge: a client whose request is larger than the
// node's SETTINGS_MAX_HEADER_LIST_SIZE gets 431 from the gateway, which
// does not send it: a node may answer one by ending the connection, and
// every client on it would get 1012. The node is not marked failing
// (eject_after = 1) and the established clients go on.
func TestH2RequestTooLarge(t *testing.T) {
	_, addr := startStdNode(t, "-max-header-bytes", "2048")
	e := newEnv(t, 0, h2Pool("h2_connections = 1\n[pools.health]\neject_after = 1", addr))
	var conns []*websocket.Conn
	for range 3 {
		conns = append(conns, e.mustDial("/ws"))
	}
	for range 3 {
		_, resp, err := e.dial("/ws", http.Header{"Cookie": {"a=" + strings.Repeat("x", 6000)}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 6 KB cookie: %v %+v, want 431", err, resp)
		}
	}
	for i, c := range conns {
		echoOnce(t, c, fmt.Sprint("still here ", i))
		c.Close()
	}
	c := e.mustDial("/ws") // the node was not ejected
	c.Close()
	e.waitZero()
}

// refusingNode answers HTTP/1.1 probes 200 and, over HTTP/2 with extended
// CONNECT, refuses every stream with RST_STREAM(REFUSED_STREAM): a node
// shedding load, which RFC 9113 section 8.7 says did not process the
// request.
func refusingNode(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				if !h2PrefaceOrProbe(nc, br) {
					return
				}
				fr := http2.NewFramer(nc, br)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				fr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							fr.WriteSettingsAck()
						}
					case *http2.MetaHeadersFrame:
						fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
					case *http2.PingFrame:
						if !f.IsAck() {
							fr.WritePing(true, f.Data)
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestH2RefusedStreamFailsOver: a node that refuses every stream is
// passed over for the next node, as after a 5xx: with a healthy node
// beside it every handshake succeeds.
func TestH2RefusedStreamFailsOver(t *testing.T) {
	bad := refusingNode(t)
	_, good := startStdNode(t)
	e := newEnv(t, 0, h2Pool("connect_tries = 2\nbalance = \"round_robin\"\n[pools.health]\neject_after = 1000", bad, good))
	for i := range 6 {
		c, resp, err := e.dial("/ws", nil)
		if err != nil {
			t.Fatalf("handshake %d: %v %+v", i, err, resp)
		}
		c.Close()
	}
	e.waitZero()
}

// TestH2SlowNodeKeepsConnection: handshakes to a node that answers after
// connect_timeout are given up (502) without resetting their streams, so
// a node that counts reset streams whose handlers still run (net/http,
// against rapid resets: more than 4 x its MAX_CONCURRENT_STREAMS ends the
// connection) never ends the connection the established clients share.
func TestH2SlowNodeKeepsConnection(t *testing.T) {
	_, addr := startStdNode(t, "-max-streams", "8")
	e := newEnv(t, 0, h2Pool("h2_connections = 1\nconnect_timeout = \"300ms\"\nconnect_tries = 1\n[pools.health]\neject_after = 1000", addr))
	var conns []*websocket.Conn
	for range 3 {
		conns = append(conns, e.mustDial("/ws"))
	}
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 3 * time.Millisecond)
			_, resp, err := e.dial("/slow", nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
				t.Errorf("a handshake past connect_timeout: %v %+v, want 502", err, resp)
			}
		})
	}
	wg.Wait()
	for i, c := range conns {
		echoOnce(t, c, fmt.Sprint("still here ", i))
		c.Close()
	}
	e.waitZero()
}

// TestH2RelayFanout carries a room's members to two relay-backend
// replicas over HTTP/2: each replica's members share one connection, a
// message reaches every member on both, and a replica's drain (GOAWAY,
// then 1001 to each member) closes its members and takes no new stream,
// while the other replica's members go on.
func TestH2RelayFanout(t *testing.T) {
	e := newEnv(t, 2, strings.Replace(twoNodes, "name = \"relay\"\n", "name = \"relay\"\nprotocol = \"h2\"\nh2_connections = 1\n", 1))
	const n = 10
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = e.mustDial("/room/h2-fan?hello=1")
		var h struct{ Replica string }
		_ = conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := conns[i].ReadJSON(&h); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range e.addrs {
		if st := e.h2Set(a).Stats(); st.Conns != 1 || st.Streams != n/2 {
			t.Errorf("relay %d: set %+v, want %d streams on one connection", i+1, st, n/2)
		}
	}
	if err := conns[0].WriteMessage(websocket.TextMessage, []byte("to everyone")); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns[1:] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "to everyone" {
			t.Fatalf("member %d: %q %v", i+1, msg, err)
		}
	}
	if err := e.relays[0].Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	var gone, stayed atomic.Int32
	var wg sync.WaitGroup
	// Drain returned once its members were closed (over its 5s window):
	// their 1001s are in; the others' reads time out.
	deadline := time.Now().Add(500 * time.Millisecond)
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(deadline)
			_, _, err := c.ReadMessage()
			switch {
			case websocket.IsCloseError(err, 1001):
				gone.Add(1)
			case isTimeout(err):
				stayed.Add(1)
			default:
				t.Errorf("member: %v", err)
			}
			c.Close()
		})
	}
	wg.Wait()
	if gone.Load() != n/2 || stayed.Load() != n/2 {
		t.Errorf("after one replica's drain: %d closed with 1001, %d stayed; want %d each", gone.Load(), stayed.Load(), n/2)
	}
	if st := e.h2Set(e.addrs[0]).Stats(); st.Conns != 0 {
		t.Errorf("the drained relay's connection still takes streams: %+v", st)
	}
	e.waitZero()
}
