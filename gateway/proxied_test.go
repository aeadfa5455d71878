package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/internal/proxyproto"
	"github.com/wsgate/wsgate/internal/testproc"
)

// refusedAt reads wsgate_connections_refused_total{limit=limit}.
func refusedAt(s *Server, limit string) float64 {
	var d dto.Metric
	_ = s.metrics.Refused.WithLabelValues(limit).Write(&d)
	return d.GetCounter().GetValue()
}

// waitRefused waits until limit's refusals reach n.
func waitRefused(t *testing.T, s *Server, limit string, n float64) {
	t.Helper()
	waitUntil(t, func() bool { return refusedAt(s, limit) == n })
	if got := refusedAt(s, limit); got != n {
		t.Fatalf("refused{limit=%q} = %v, want %v", limit, got, n)
	}
}

// closedWithoutAnswer checks that the gateway closes c without a byte.
func closedWithoutAnswer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound, not a speed
	b, err := io.ReadAll(c)
	var ne net.Error
	if len(b) > 0 || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("want the connection closed without an answer, got %q, %v", b, err)
	}
}

// recorderConfig is a gateway config with gateway lines (and any sections
// after them) and one pool, its one node node, behind a catch-all route.
func recorderConfig(gateway string, node *wireRecorder) string {
	return fmt.Sprintf("[gateway]\nlisten = \"127.0.0.1:0\"\ndrain_window = \"100ms\"\ndrain_timeout = \"5s\"\n%s\n"+
		"[admin]\nlisten = \"\"\n[[pools]]\nname = \"back\"\n  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"back\"\n",
		gateway, node.srv.Listener.Addr().String())
}

// viaBalancer sends head (a PROXY header) and req on a new connection
// from the trusted 127.0.0.2 to gw, reads the answer's status and closes
// the connection.
func viaBalancer(t *testing.T, gw string, head []byte, req string) int {
	t.Helper()
	c := rawConn(t, gw, "127.0.0.2")
	defer c.Close()
	_, _ = c.Write(append(head, req...))
	return readAnswer(t, c).StatusCode
}

// upgradeReq is a WebSocket handshake for path with extra header lines.
func upgradeReq(path, extra string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: gw\r\n" + wsHeaders + extra + "\r\n"
}

// v1Header is a PROXY v1 header from src to the gateway.
func v1Header(src string) string {
	return fmt.Sprintf("PROXY TCP4 %s 127.0.0.1 40000 8080\r\n", src)
}

// TestProxyProtocol pins issue 11 item 2 on a real gateway, node and auth
// plugin: with proxy_protocol on, a trusted balancer's version 1 or 2
// header names the client for max_conns_per_ip (429 charged to the carried
// address, not the balancer's), X-Forwarded-For (the client's own
// replaced, since it is not trusted), the auth plugin and the access log; a LOCAL header keeps the balancer's address
// (trusted, so its X-Forwarded-For is kept); an untrusted peer, a
// malformed header, an oversized one and a silent peer are closed without
// an answer and counted; a silent peer does not hold up the next
// connection; every slot is free at the end.
func TestProxyProtocol(t *testing.T) {
	node := newWireRecorder(t)
	var logs testproc.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	plugin := testproc.Build(t, "./plugins/internal/testplugin")
	srv := startGatewayLog(t, recorderConfig(fmt.Sprintf(`
handshake_timeout = "1s"
max_conns_per_ip = 1
proxy_protocol = true
trusted_proxies = ["127.0.0.2/32", "::1"]
[log]
access = true
[[routes]]
path_prefix = "/auth/"
pool = "back"
auth = ["t"]
[[plugins]]
name = "t"
path = %q`, plugin), node), log)
	gw := srv.Addr().String()

	// A silent trusted peer first: the others must not wait for it.
	silent := rawConn(t, gw, "127.0.0.2")

	// Version 1, sent in two pieces (the header split across reads).
	a := rawConn(t, gw, "127.0.0.2")
	h := v1Header("203.0.113.9")
	_, _ = a.Write([]byte(h[:10]))
	time.Sleep(20 * time.Millisecond) // lets the first piece arrive alone; not a timing assertion
	_, _ = a.Write([]byte(h[10:] + upgradeReq("/a", "X-Forwarded-For: 6.6.6.6\r\n")))
	if resp := readAnswer(t, a); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("v1: %d, want 101", resp.StatusCode)
	}
	if got := node.last().header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "203.0.113.9" {
		t.Fatalf("v1: X-Forwarded-For at the node %q, want only the carried client address", got)
	}

	// Version 2 with the same client address: over max_conns_per_ip = 1
	// for 203.0.113.9, while the balancer's own address is not at stake.
	b := rawConn(t, gw, "127.0.0.2")
	hdr := proxyproto.AppendV2(nil, netip.MustParseAddrPort("203.0.113.9:40001"), netip.MustParseAddrPort("127.0.0.1:8080"))
	_, _ = b.Write(append(hdr, upgradeReq("/b", "")...))
	resp := readAnswer(t, b)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("v2, same client: %d %v, want 429 with Retry-After", resp.StatusCode, resp.Header)
	}

	// Version 2, another client: admitted.
	hdr = proxyproto.AppendV2(nil, netip.MustParseAddrPort("[2001:db8::7]:40002"), netip.MustParseAddrPort("[2001:db8::1]:8080"))
	if code := viaBalancer(t, gw, hdr, upgradeReq("/d", "")); code != http.StatusSwitchingProtocols {
		t.Fatalf("v2: %d, want 101", code)
	}
	if got := node.last().header.Get("X-Forwarded-For"); got != "2001:db8::7" {
		t.Fatalf("v2: X-Forwarded-For at the node %q", got)
	}

	// LOCAL (a balancer's health check): the socket's address stands, and
	// being trusted, its X-Forwarded-For is kept.
	local := []byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00")
	if code := viaBalancer(t, gw, local, upgradeReq("/l", "X-Forwarded-For: 198.51.100.1\r\n")); code != http.StatusSwitchingProtocols {
		t.Fatalf("LOCAL: %d, want 101", code)
	}
	if got := node.last().header.Get("X-Forwarded-For"); got != "198.51.100.1, 127.0.0.2" {
		t.Fatalf("LOCAL: X-Forwarded-For at the node %q, want the balancer's kept and its address added", got)
	}

	// The auth plugin is given the carried address.
	if code := viaBalancer(t, gw, []byte(v1Header("203.0.113.77")), upgradeReq("/auth/p", "")); code != http.StatusSwitchingProtocols {
		t.Fatalf("auth route: %d, want 101", code)
	}
	if got := node.last().header.Get("X-Client-Addr"); got != "203.0.113.77:40000" {
		t.Fatalf("the plugin was given client address %q, want the carried 203.0.113.77:40000", got)
	}

	// Refused without an answer.
	u := rawConn(t, gw, "127.0.0.3") // not trusted
	_, _ = u.Write([]byte(v1Header("203.0.113.50") + upgradeReq("/u", "")))
	closedWithoutAnswer(t, u)
	waitRefused(t, srv, "proxy_untrusted", 1)

	for i, bad := range []string{
		upgradeReq("/nohdr", ""), // a client that skipped the balancer's header
		"PROXY TCP4 203.0.113.9 127.0.0.1 0400 80\r\n" + upgradeReq("/x", ""),
		string(append([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x07\xd0"), make([]byte, 2000)...)), // 2000 bytes of TLVs
	} {
		m := rawConn(t, gw, "127.0.0.2")
		_, _ = m.Write([]byte(bad))
		closedWithoutAnswer(t, m)
		waitRefused(t, srv, "proxy_header", float64(i+1))
	}
	// The silent peer is cut at handshake_timeout.
	closedWithoutAnswer(t, silent)
	waitRefused(t, srv, "proxy_header", 4)
	// One line a second at most: the first refusal has its line.
	if !strings.Contains(logs.String(), `"msg":"connection refused: PROXY protocol","reason":"proxy_untrusted","peer":"127.0.0.3"`) {
		t.Errorf("no log line for the untrusted peer:\n%s", logs.String())
	}

	// The access log names the carried client, for tunnels and refusals.
	a.Close()
	waitUntil(t, func() bool { return srv.limits.Open() == 0 })
	if n := srv.limits.Open(); n != 0 {
		t.Fatalf("open slots %d after every client left, want 0", n)
	}
	for _, want := range []string{`"client":"203.0.113.9:40000"`, `"client":"203.0.113.9:40001"`, `"client":"[2001:db8::7]:40002"`} {
		waitUntil(t, func() bool { return strings.Contains(logs.String(), want) })
		if !strings.Contains(logs.String(), want) {
			t.Errorf("access log lacks %s:\n%s", want, logs.String())
		}
	}
	if left := srv.limits.ByIP(); len(left) != 0 {
		t.Errorf("per-IP places left: %v", left)
	}
}

// TestForwardedForTrust pins the other half of trusted_proxies without
// PROXY protocol: a client outside it has its X-Forwarded-For replaced by
// its address; a trusted one keeps its own, with its address added. The
// Forwarded field (RFC 7239) is treated the same way, on upgrades and
// plain requests: before, a client's reached the node unchanged while its
// X-Forwarded-For was replaced.
func TestForwardedForTrust(t *testing.T) {
	node := newWireRecorder(t)
	srv := startGateway(t, recorderConfig(`trusted_proxies = ["127.0.0.5"]`, node))
	gw := srv.Addr().String()
	for _, tc := range []struct{ from, want, wantFwd string }{
		{"127.0.0.4", "127.0.0.4", "for=127.0.0.4;proto=http"},
		{"127.0.0.5", "1.1.1.1, 2.2.2.2, 127.0.0.5", "for=1.1.1.1, for=2.2.2.2, for=127.0.0.5;proto=http"},
	} {
		for _, req := range []string{
			upgradeReq("/ws", "X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\nForwarded: for=1.1.1.1\r\nForwarded: for=2.2.2.2\r\n"),
			"GET /info HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\nForwarded: for=1.1.1.1, for=2.2.2.2\r\nConnection: close\r\n\r\n",
		} {
			c := rawConn(t, gw, tc.from)
			_, _ = c.Write([]byte(req))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			c.Close()
			h := node.last().header
			if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != tc.want {
				t.Errorf("from %s, %q: X-Forwarded-For at the node %q, want %q", tc.from, strings.Fields(req)[1], got, tc.want)
			}
			if got := h.Values("Forwarded"); len(got) != 1 || got[0] != tc.wantFwd {
				t.Errorf("from %s, %q: Forwarded at the node %q, want %q", tc.from, strings.Fields(req)[1], got, tc.wantFwd)
			}
		}
	}
}

// proxyNode is a node that takes a PROXY header on every connection, as
// HAProxy's accept-proxy does: it records each header and serves HTTP on
// what follows (/healthz, WebSocket upgrades, and 200 to anything else);
// a connection without a valid header is counted and closed.
type proxyNode struct {
	addr  string
	mu    sync.Mutex
	heads []proxyproto.Header
	bad   int
}

// headConn is a node-side connection past its PROXY header: head holds
// the bytes read past it, read first.
type headConn struct {
	net.Conn
	head []byte
}

func (c *headConn) Read(b []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// chanListener hands out the connections a proxyNode has read a header on.
type chanListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

func newProxyNode(t *testing.T) *proxyNode {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &proxyNode{addr: ln.Addr().String()}
	cl := &chanListener{Listener: ln, conns: make(chan net.Conn)}
	go func() {
		defer close(cl.conns)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				h, rest, err := edge.ReadProxyHeader(c)
				_ = c.SetReadDeadline(time.Time{})
				n.mu.Lock()
				if err != nil {
					n.bad++
				} else {
					n.heads = append(n.heads, h)
				}
				n.mu.Unlock()
				if err != nil {
					c.Close()
					return
				}
				cl.conns <- &headConn{Conn: c, head: rest}
			}()
		}
	}()
	up := websocket.Upgrader{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if websocket.IsWebSocketUpgrade(r) {
			if c, err := up.Upgrade(w, r, nil); err == nil {
				c.Close()
			}
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return n
}

// seen returns the headers recorded so far and the connections refused.
func (n *proxyNode) seen() ([]proxyproto.Header, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]proxyproto.Header(nil), n.heads...), n.bad
}

// TestSendProxyV2 pins the pool's send_proxy_v2 against a node that
// expects a header on every connection: health probes send LOCAL (the
// node comes up), a handshake's connection carries the client's address
// and port and the gateway address it reached, and each plain request on
// one keep-alive client connection gets a node connection of its own with
// that client's header.
func TestSendProxyV2(t *testing.T) {
	node := newProxyNode(t)
	srv := startGateway(t, fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "100ms"
drain_timeout = "5s"
[admin]
listen = ""
[[pools]]
name = "back"
send_proxy_v2 = true
  [pools.health]
  interval = "100ms"
  timeout = "100ms"
  rise = 1
  [[pools.nodes]]
  addr = %q
[[routes]]
pool = "back"
`, node.addr))
	gw := srv.Addr().String()
	waitUntil(t, func() bool {
		heads, _ := node.seen()
		return slices.ContainsFunc(heads, func(h proxyproto.Header) bool { return h.Local && h.Version == 2 })
	})
	count := func() int { h, _ := node.seen(); return len(h) }
	clientHeads := func(from int) []proxyproto.Header {
		heads, _ := node.seen()
		var out []proxyproto.Header
		for _, h := range heads[from:] {
			if !h.Local {
				out = append(out, h)
			}
		}
		return out
	}

	before := count()
	c := rawConn(t, gw, "127.0.0.6")
	_, _ = c.Write([]byte(upgradeReq("/ws", "")))
	if resp := readAnswer(t, c); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %d, want 101", resp.StatusCode)
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	got := clientHeads(before)
	if len(got) != 1 || got[0].Source != local || got[0].Dest.String() != gw {
		t.Fatalf("handshake: node got %+v, want one header from %v to %s", got, local, gw)
	}
	c.Close()

	before = count()
	p := rawConn(t, gw, "127.0.0.6")
	br := bufio.NewReader(p)
	for i := range 2 {
		_, _ = p.Write([]byte("GET /info HTTP/1.1\r\nHost: gw\r\n\r\n"))
		_ = p.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("plain request %d: %v %v", i, resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	local = p.LocalAddr().(*net.TCPAddr).AddrPort()
	got = clientHeads(before)
	if len(got) != 2 || got[0].Source != local || got[1].Source != local {
		t.Fatalf("two plain requests: node got %+v, want two connections with headers from %v", got, local)
	}
	if _, bad := node.seen(); bad != 0 {
		t.Fatalf("%d node connections without a valid header", bad)
	}
}
