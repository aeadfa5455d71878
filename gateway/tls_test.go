package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
)

// tlsFiles is a test CA and the server certificates a TLS listener gets:
// the default one for "gw.test" and 127.0.0.1, a wildcard for
// "*.example.test" and an exact one for "a.example.test", in that order.
type tlsFiles struct {
	ca    *testca.CA
	dir   string
	leafs []*testca.Leaf
	certs [][2]string // cert_file, key_file
}

func newTLSFiles(t testing.TB) *tlsFiles {
	t.Helper()
	ca, err := testca.New("wsgate test CA")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFiles{ca: ca, dir: t.TempDir()}
	for i, names := range [][]string{{"gw.test", "127.0.0.1"}, {"*.example.test"}, {"a.example.test"}} {
		leaf, err := ca.Server(names...)
		if err != nil {
			t.Fatal(err)
		}
		c, k, err := leaf.WriteFiles(f.dir, fmt.Sprintf("server%d", i))
		if err != nil {
			t.Fatal(err)
		}
		f.leafs = append(f.leafs, leaf)
		f.certs = append(f.certs, [2]string{c, k})
	}
	return f
}

// table renders a [gateway.tls] table listening on addr with the files'
// certificates and extra keys (client_ca_file).
func (f *tlsFiles) table(addr, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  [gateway.tls]\n  listen = %q\n%s\n", addr, extra)
	for _, c := range f.certs {
		fmt.Fprintf(&b, "  [[gateway.tls.certificates]]\n  cert_file = %q\n  key_file = %q\n", c[0], c[1])
	}
	return b.String()
}

// clientConfig trusts the test CA and asks for serverName.
func (f *tlsFiles) clientConfig(serverName string) *tls.Config {
	return &tls.Config{RootCAs: f.ca.Pool(), ServerName: serverName}
}

// tlsGatewayConfig is a gateway config (newEnv's format: %[1]q the plain
// listener, %[2]q the node) with gwKeys in [gateway], tls as its
// [gateway.tls] table, and routes.
func tlsGatewayConfig(gwKeys, tlsTable, routes string) string {
	return `
[gateway]
listen = %[1]q
drain_window = "200ms"
drain_timeout = "5s"
` + gwKeys + "\n" + tlsTable + `
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %[2]q
` + routes
}

const catchAll = "[[routes]]\npath_prefix = \"/\"\npool = \"relay\"\n"

// counterValue reads one counter of the gateway's metrics.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// wssDial opens a WebSocket through the TLS listener at addr.
func wssDial(addr, path string, cfg *tls.Config) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, TLSClientConfig: cfg}
	return d.Dial("wss://"+addr+path, nil)
}

// servedLeaf is the certificate the TLS listener at addr serves for
// serverName (no verification: the test compares it).
func servedLeaf(t *testing.T, addr, serverName string) []byte {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: serverName, InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS dial for %q: %v", serverName, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Raw
}

// TestTLSListenerSNIVersionsAndTunnel checks the TLS listener end to end:
// certificates chosen by SNI (exact name before wildcard, wildcard for one
// label only, the first certificate otherwise), TLS 1.3 and 1.2 with ALPN
// http/1.1, TLS 1.1 refused, and a wss tunnel through it to a relay that
// carries frames both ways and returns every count to zero.
func TestTLSListenerSNIVersionsAndTunnel(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()

	for _, c := range []struct {
		sni  string
		want int
	}{
		{"a.example.test", 2}, {"A.Example.Test.", 2}, {"b.example.test", 1},
		{"x.b.example.test", 0}, {"example.test", 0}, {"other.test", 0}, {"", 0},
	} {
		if got := servedLeaf(t, addr, c.sni); !bytes.Equal(got, f.leafs[c.want].Cert.Raw) {
			t.Errorf("SNI %q: served a certificate other than #%d", c.sni, c.want)
		}
	}
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		cfg := f.clientConfig("gw.test")
		cfg.MinVersion, cfg.MaxVersion = v, v
		cfg.NextProtos = []string{"h2", "http/1.1"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("%s: %v", tls.VersionName(v), err)
		}
		st := c.ConnectionState()
		if st.Version != v || st.NegotiatedProtocol != "http/1.1" {
			t.Errorf("%s: negotiated %s, ALPN %q", tls.VersionName(v), tls.VersionName(st.Version), st.NegotiatedProtocol)
		}
		_ = c.Close()
	}
	old := f.clientConfig("gw.test")
	old.MinVersion, old.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
	if c, err := tls.Dial("tcp", addr, old); err == nil {
		_ = c.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}

	a, _, err := wssDial(addr, "/room/t1?hello=1", f.clientConfig("a.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := wssDial(addr, "/room/t1?hello=1", f.clientConfig("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*websocket.Conn{a, b} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); err != nil { // hello
			t.Fatal(err)
		}
	}
	msg := strings.Repeat("tls-", 50000) // 200 KB: many TLS records
	if err := a.WriteMessage(websocket.BinaryMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if _, got, err := b.ReadMessage(); err != nil || string(got) != msg {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
	_ = a.Close()
	_ = b.Close()
	e.waitZero()
}

// TestTLSPlainHTTPSameAdmission checks that plain HTTP requests on the
// TLS listener take the admission path of the plain listener: proxied on a
// route that takes them (the node's answer passed on; the proxy to the
// node is plain HTTP), 426 on one that takes handshakes only, 404 without
// a route; a handshake carries X-Forwarded-Proto https.
func TestTLSPlainHTTPSameAdmission(t *testing.T) {
	f := newTLSFiles(t)
	back := newRecorder(t)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), `
[[routes]]
path_prefix = "/api/"
pool = "relay"
[[routes]]
path_prefix = "/ws/"
pool = "relay"
plain_http = "refuse"
`), "127.0.0.1:0", back.addr())
	srv := startGateway(t, cfg)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: f.clientConfig("gw.test")}}
	defer hc.CloseIdleConnections()
	base := "https://" + srv.TLSAddr().String()
	// The recording node answers a plain GET with its upgrader's 400.
	for path, want := range map[string]int{"/api/x": 400, "/ws/x": 426, "/none": 404} {
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	_, _, err := wssDial(srv.TLSAddr().String(), "/ws/x", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	hs := back.headers()
	if len(hs) == 0 || hs[len(hs)-1].Get("X-Forwarded-Proto") != "https" {
		t.Fatalf("node saw X-Forwarded-Proto %q, want https", hs[len(hs)-1].Get("X-Forwarded-Proto"))
	}
}

// TestTLSHandshakeTimeout checks that a client that opens a TCP connection
// to the TLS listener and never finishes the TLS handshake (sends nothing,
// or half a ClientHello) holds its connection slot only until
// handshake_timeout, then is closed.
func TestTLSHandshakeTimeout(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig(`handshake_timeout = "300ms"`, f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()
	for _, send := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(send); err != nil {
			t.Fatal(err)
		}
		e.waitOpen(1)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err = io.Copy(io.Discard, c) // until the gateway closes it
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			t.Fatalf("sent % x: the gateway never closed an unfinished TLS handshake", send)
		}
		_ = c.Close()
		e.waitOpen(0)
	}
}

// TestTLSSharesConnectionLimits checks that a TLS socket counts toward
// max_conns_per_ip and max_conns from accept, like a plain one: with one
// TLS connection open, a plain connection gets the limit's status (429,
// 503), and a second TLS connection is closed before its handshake and
// counted as refused under the limit's name.
func TestTLSSharesConnectionLimits(t *testing.T) {
	f := newTLSFiles(t)
	for _, c := range []struct {
		key, limit string
		status     int
	}{
		{"max_conns_per_ip = 1", "max_conns_per_ip", http.StatusTooManyRequests},
		{"max_conns = 1", "max_conns", http.StatusServiceUnavailable},
	} {
		t.Run(c.limit, func(t *testing.T) {
			e := newEnv(t, 1, tlsGatewayConfig(c.key, f.table(testproc.FreeAddr(t), ""), catchAll))
			addr := e.srv.TLSAddr().String()
			held, err := tls.Dial("tcp", addr, f.clientConfig("gw.test"))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			e.waitOpen(1)

			plain := rawConn(t, e.gw, "127.0.0.1")
			if resp := readAnswer(t, plain); resp.StatusCode != c.status {
				t.Fatalf("plain connection beside a TLS one: %d, want %d", resp.StatusCode, c.status)
			}
			_ = plain.Close()
			second, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, f.clientConfig("gw.test"))
			if err == nil {
				_ = second.Close()
				t.Fatalf("a second TLS connection over %s finished its handshake", c.limit)
			}
			// Counted once the socket is closed.
			waitUntil(t, func() bool { return counterValue(t, e.srv.metrics.Refused.WithLabelValues(c.limit)) == 2 })
			_ = held.Close()
			e.waitZero()
		})
	}
}

// TestTLSBytesBehindTheRequestKept checks that a frame the client sends
// right behind its upgrade request, in its own TLS record but in the same
// TCP segment, reaches the node: detach hands the tunnel the *tls.Conn
// with what it and fasthttp's buffer already hold.
func TestTLSBytesBehindTheRequestKept(t *testing.T) {
	f := newTLSFiles(t)
	back := newRecorder(t) // echoes frames
	e := newEnv(t, 0, fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll), "%[1]s", back.addr()))
	addr := e.srv.TLSAddr().String()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	held := &heldWrites{Conn: raw}
	c := tls.Client(held, f.clientConfig("gw.test"))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	held.hold = true
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw.test\r\n"+wsHeaders+"\r\n"); err != nil {
		t.Fatal(err)
	}
	frame := []byte{0x81, 0x85, 1, 2, 3, 4, 'h' ^ 1, 'e' ^ 2, 'l' ^ 3, 'l' ^ 4, 'o' ^ 1} // masked "hello"
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	if err := held.flush(); err != nil { // both records in one write
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("want 101: %v %v", err, resp)
	}
	echo := make([]byte, 7)
	if _, err := io.ReadFull(br, echo); err != nil || !bytes.Equal(echo, []byte{0x81, 5, 'h', 'e', 'l', 'l', 'o'}) {
		t.Fatalf("echo: % x %v", echo, err)
	}
}

// heldWrites is a connection whose writes, once hold is set, are kept
// until flush sends them in one write.
type heldWrites struct {
	net.Conn
	hold bool
	buf  []byte
}

func (h *heldWrites) Write(b []byte) (int, error) {
	if !h.hold {
		return h.Conn.Write(b)
	}
	h.buf = append(h.buf, b...)
	return len(b), nil
}

func (h *heldWrites) flush() error {
	h.hold = false
	_, err := h.Conn.Write(h.buf)
	return err
}

// TestTLSFilesReloadedOnChange checks that a certificate file rewritten in
// place is served to the next handshakes without a restart, that a live
// wss tunnel carries on untouched, that a broken file keeps the
// certificates in force (counted as an error), that a config reload
// naming a missing file is refused with its file, line and key, and that
// one dropping [gateway.tls] leaves the running listener its certificates
// (it needs a restart).
func TestTLSFilesReloadedOnChange(t *testing.T) {
	f := newTLSFiles(t)
	tlsAddr := testproc.FreeAddr(t)
	cfgFmt := tlsGatewayConfig("", f.table(tlsAddr, ""), catchAll)
	e := newEnv(t, 1, cfgFmt)
	addr := e.srv.TLSAddr().String()
	live, _, err := wssDial(addr, "/room/live?hello=1", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	_ = live.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, _, err := live.ReadMessage(); err != nil {
		t.Fatal(err)
	}

	next, err := f.ca.Server("gw.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	// The key first, then the certificate: in between the pair does not
	// match, which must not replace what is served.
	if err := os.WriteFile(f.certs[0][1], next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return counterValue(t, e.srv.metrics.TLSReloads.WithLabelValues("error")) >= 1 })
	if !bytes.Equal(servedLeaf(t, addr, "gw.test"), f.leafs[0].Cert.Raw) {
		t.Fatal("a mismatched key replaced the certificate in force")
	}
	if err := os.WriteFile(f.certs[0][0], next.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return bytes.Equal(servedLeaf(t, addr, "gw.test"), next.Cert.Raw) })
	if v := counterValue(t, e.srv.metrics.TLSReloads.WithLabelValues("ok")); v < 1 {
		t.Fatalf("tls reloads ok = %v", v)
	}
	if err := live.WriteMessage(websocket.TextMessage, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	peer, _, err := wssDial(addr, "/room/live", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if err := peer.WriteMessage(websocket.TextMessage, []byte("from the new certificate")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := live.ReadMessage(); err != nil || string(got) != "from the new certificate" {
		t.Fatalf("live tunnel after the reload: %q %v", got, err)
	}

	path := filepath.Join(t.TempDir(), "wsgate.toml")
	bad := strings.Replace(fmt.Sprintf(cfgFmt, e.gw, e.addrs[0]), f.certs[2][0], filepath.Join(f.dir, "missing.crt"), 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	err = e.srv.ReloadFrom(path)
	var ce *conf.Error
	if !errors.As(err, &ce) || ce.Key != "gateway.tls.certificates[2]" || ce.Line == 0 || !strings.Contains(ce.Msg, "missing.crt") {
		t.Fatalf("reload with a missing certificate: %v", err)
	}
	if !bytes.Equal(servedLeaf(t, addr, "a.example.test"), f.leafs[2].Cert.Raw) {
		t.Fatal("a refused reload changed the certificates")
	}

	// A file without [gateway.tls] reloads, but the TLS listener stays
	// until a restart, serving the certificates it has.
	plain := strings.Replace(fmt.Sprintf(cfgFmt, e.gw, e.addrs[0]), f.table(tlsAddr, ""), "", 1)
	if err := os.WriteFile(path, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	if st := e.srv.LastReload(); !slices.Contains(st.Restart, "gateway.tls.listen") {
		t.Fatalf("needs restart: %q", st.Restart)
	}
	if !bytes.Equal(servedLeaf(t, addr, "a.example.test"), f.leafs[2].Cert.Raw) {
		t.Fatal("a reload without [gateway.tls] changed what the TLS listener serves")
	}
}

// TestTLSClientCertificates checks mutual TLS: without a certificate, or
// with one from another CA, the TLS handshake fails; with one from
// client_ca_file the auth plugin gets the TLS version, server name, ALPN
// and the verified chain, whose subject and SANs it hands on.
func TestTLSClientCertificates(t *testing.T) {
	f := newTLSFiles(t)
	caFile := filepath.Join(f.dir, "clients.pem")
	clients, err := testca.New("client CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, clients.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	alice, err := clients.Client("alice", "alice@example.test", "spiffe://example.test/alice")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := f.ca.Client("mallory", "", "") // the server CA: not trusted for clients
	if err != nil {
		t.Fatal(err)
	}
	back := newRecorder(t)
	plugin := testproc.Build(t, "./plugins/internal/testplugin")
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), fmt.Sprintf("  client_ca_file = %q", caFile)), `
[[routes]]
pool = "relay"
auth = ["t"]
[[plugins]]
name = "t"
path = %[3]q
  [plugins.config]
  tag = "mtls"
`), "127.0.0.1:0", back.addr(), plugin)
	srv := startGateway(t, cfg)
	addr := srv.TLSAddr().String()

	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "untrusted": {mallory.TLS()}} {
		cc := f.clientConfig("a.example.test")
		cc.Certificates = certs
		if ws, _, err := wssDial(addr, "/x", cc); err == nil {
			_ = ws.Close()
			t.Errorf("%s: handshake succeeded", name)
		}
	}
	cc := f.clientConfig("a.example.test")
	cc.Certificates = []tls.Certificate{alice.TLS()}
	cc.NextProtos = []string{"http/1.1"}
	ws, _, err := wssDial(addr, "/x", cc)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	hs := back.headers()
	if len(hs) != 1 {
		t.Fatalf("node saw %d handshakes, want 1", len(hs))
	}
	h := hs[0]
	want := map[string]string{
		"X-Tls-Version":     "TLS 1.3",
		"X-Tls-Server-Name": "a.example.test",
		"X-Tls-Alpn":        "http/1.1",
		"X-Client-Subject":  "CN=alice,O=wsgate test",
		"X-Client-San":      "alice@example.test,spiffe://example.test/alice",
		"X-Client-Chain":    "2",
	}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, h.Get(k), v)
		}
	}
}
