package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/proxyproto"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// nodeCA is a CA that issues the nodes' certificates, written to a file
// for the gateway's [pools.tls] ca_file.
type nodeCA struct {
	*testca.CA
	file string // the CA's certificate, PEM
	dir  string
}

func newNodeCA(t *testing.T, name string) *nodeCA {
	t.Helper()
	ca, err := testca.New(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(f, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return &nodeCA{CA: ca, file: f, dir: dir}
}

// serverCert issues a node certificate for 127.0.0.1 and relay.test.
func (ca *nodeCA) serverCert(t *testing.T) tls.Certificate {
	t.Helper()
	leaf, err := ca.Server("relay.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return leaf.TLS()
}

// tlsRelays are in-process relays on one bus, each serving TLS.
type tlsRelays struct {
	mem    *bus.Memory
	relays []*relay.Relay
	addrs  []string
}

// startTLSRelays starts n relays serving cfg on loopback.
func startTLSRelays(t *testing.T, n int, cfg *tls.Config) *tlsRelays {
	t.Helper()
	rs := &tlsRelays{mem: bus.NewMemory()}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r := relay.New(relay.Options{ID: fmt.Sprintf("tls-relay-%d", i+1), Bus: rs.mem.Endpoint(), Logger: quietLog()})
		go func() { _ = r.Serve(tls.NewListener(ln, cfg)) }()
		rs.relays = append(rs.relays, r)
		rs.addrs = append(rs.addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		for _, r := range rs.relays {
			_ = r.Close(context.Background())
		}
		_ = rs.mem.Close()
	})
	return rs
}

// tlsPoolConf is a gateway config with one pool of the nodes at addrs,
// with pool's extra lines and the [pools.tls] lines table. Its probes
// come often, with a timeout a loaded machine's TLS handshake meets.
func tlsPoolConf(pool, table string, addrs ...string) string {
	return poolConf(pool+`
  [pools.health]
  interval = "300ms"
  timeout = "300ms"
  [pools.tls]
`+table, addrs...)
}

// caLine is the [pools.tls] line trusting ca.
func caLine(ca *nodeCA) string { return fmt.Sprintf("  ca_file = %q\n", ca.file) }

// roomPair dials two clients into one room, each reading the relay's
// hello (so both have joined), and checks that a message of the first
// reaches the second.
func (e *env) roomPair(room string) (a, b *websocket.Conn) {
	e.t.Helper()
	a = e.mustDial("/room/" + room + "?hello=1")
	b = e.mustDial("/room/" + room + "?hello=1")
	for _, c := range []*websocket.Conn{a, b} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); err != nil { // hello
			e.t.Fatal(err)
		}
	}
	relayMessage(e.t, a, b, strings.Repeat("over TLS ", 2000))
	return a, b
}

// relayMessage checks that msg from a reaches b.
func relayMessage(t *testing.T, a, b *websocket.Conn, msg string) {
	t.Helper()
	if err := a.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, got, err := b.ReadMessage(); err != nil || string(got) != msg {
		t.Fatalf("got %d bytes, %v; want %d bytes", len(got), err, len(msg))
	}
}

// waitProbe waits until the last health probe of the node at addr got
// result (a prefix of it).
func (e *env) waitProbe(addr, result string) {
	e.t.Helper()
	p := e.srv.current().pools["relay"]
	var st string
	for range 500 {
		if v := p.CheckView(addr); v != nil && v.Last != "" {
			if st = v.Result; strings.HasPrefix(st, result) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("last probe of %s: %q, want %q", addr, st, result)
}

// passiveFailures is the count of failed dials and handshakes in a row
// of the node at addr.
func (e *env) passiveFailures(addr string) int {
	st, _ := e.srv.current().pools["relay"].Health.Status(addr)
	return st.PassiveFailures
}

// TestTLSNodeHTTP1 runs an "http1" pool over TLS to relays serving TLS
// only: messages cross the tunnels both ways, health probes pass over
// TLS, a plain HTTP request is forwarded over TLS, and a node that dies
// gives its clients 1012.
func TestTLSNodeHTTP1(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	rs := startTLSRelays(t, 1, &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}})
	e := newEnv(t, 0, tlsPoolConf("", caLine(ca), rs.addrs...))
	e.waitProbe(rs.addrs[0], "ok")

	a, b := e.roomPair("tls")
	relayMessage(t, b, a, "and back")
	if n := rs.relays[0].Info().Connections; n != 2 {
		t.Errorf("the relay holds %d members, want 2", n)
	}

	resp, err := http.Get("http://" + e.gw + "/info")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"connections"`) {
		t.Fatalf("GET /info through the gateway: %d %s", resp.StatusCode, body)
	}
	http.DefaultClient.CloseIdleConnections()

	// Cut the relay's side without a close frame.
	_ = rs.relays[0].Close(context.Background())
	for _, c := range []*websocket.Conn{a, b} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1012) {
			t.Errorf("want close 1012, got %v", err)
		}
		c.Close()
	}
	e.waitZero()
}

// TestTLSNodeRefused checks the nodes a pool must not trust: one whose
// certificate comes from a CA the pool does not trust, one reached under
// a server_name its certificate does not name, and one that requires a
// client certificate the pool does not have. Each handshake is refused
// with 502, the node is charged with a failure, and its probes fail.
// Given cert_file and key_file, the node that requires a client
// certificate takes the clients.
func TestTLSNodeRefused(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	other := newNodeCA(t, "another CA")
	client, err := ca.Client("wsgate", "", "")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := client.WriteFiles(ca.dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	clientCert := fmt.Sprintf("  cert_file = %q\n  key_file = %q\n", certFile, keyFile)
	cert := ca.serverCert(t)
	for _, tc := range []struct {
		name  string
		node  *tls.Config
		table string
		ok    bool
	}{
		{"untrusted CA", &tls.Config{Certificates: []tls.Certificate{other.serverCert(t)}}, caLine(ca), false},
		{"wrong server_name", &tls.Config{Certificates: []tls.Certificate{cert}}, caLine(ca) + "  server_name = \"other.test\"\n", false},
		{"server_name", &tls.Config{Certificates: []tls.Certificate{cert}}, caLine(ca) + "  server_name = \"relay.test\"\n", true},
		{"client certificate missing", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}, caLine(ca), false},
		{"client certificate", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}, caLine(ca) + clientCert, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startTLSRelays(t, 1, tc.node)
			addr := rs.addrs[0]
			e := newEnv(t, 0, tlsPoolConf("", tc.table, addr))
			if tc.ok {
				e.waitProbe(addr, "ok")
				a, b := e.roomPair("ok")
				a.Close()
				b.Close()
				e.waitZero()
				return
			}
			_, resp, err := e.dial("/room/refused", nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("want 502, got %v %v", resp, err)
			}
			if n := e.passiveFailures(addr); n != 1 {
				t.Errorf("the node has %d failures in a row, want 1", n)
			}
			e.waitProbe(addr, "error: ")
			if n := rs.relays[0].Info().Connections; n != 0 {
				t.Errorf("the relay holds %d members", n)
			}
		})
	}
}

// TestTLSNodeReloadSwapsCA renews the nodes' certificates under a new CA:
// the gateway refuses the node until a reload reads the new ca_file,
// then takes it; a tunnel opened before keeps running throughout.
func TestTLSNodeReloadSwapsCA(t *testing.T) {
	oldCA, newCA := newNodeCA(t, "old CA"), newNodeCA(t, "new CA")
	var serving atomic.Pointer[tls.Certificate]
	oldCert, newCert := oldCA.serverCert(t), newCA.serverCert(t)
	serving.Store(&oldCert)
	// No session tickets: a resumed session would not show the node's
	// new certificate (a node restarted with it would not resume either).
	rs := startTLSRelays(t, 1, &tls.Config{SessionTicketsDisabled: true, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return serving.Load(), nil
	}})
	dir := t.TempDir()
	caFile := filepath.Join(dir, "nodes-ca.pem")
	if err := os.WriteFile(caFile, oldCA.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	// A long interval: the probes must not take the node down meanwhile.
	cfgText := strings.Replace(tlsPoolConf("", "  ca_file = \"nodes-ca.pem\"\n", rs.addrs...), `interval = "300ms"`, `interval = "1m"`, 1)
	cfgText = fmt.Sprintf(cfgText, "127.0.0.1:0")
	cfgFile := filepath.Join(dir, "wsgate.toml")
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(cfgFile)
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
	e := &env{t: t, srv: srv, gw: srv.Addr().String()}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	a, b := e.roomPair("renewed")
	serving.Store(&newCert)
	if _, resp, err := e.dial("/room/refused", nil); err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a node certificate from a CA not in ca_file: want 502, got %v %v", resp, err)
	}
	if err := os.WriteFile(caFile, newCA.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadFrom(cfgFile); err != nil {
		t.Fatal(err)
	}
	c := e.mustDial("/room/after-reload?hello=1")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); err != nil { // the relay's hello
		t.Fatalf("the client after the reload: %v", err)
	}
	relayMessage(t, a, b, "the tunnels from before the reload run on")
	for _, c := range []*websocket.Conn{a, b, c} {
		c.Close()
	}
	e.waitZero()

	// A file that cannot be read fails the reload with the key, and
	// leaves the running config alone.
	if err := os.Remove(caFile); err != nil {
		t.Fatal(err)
	}
	err = srv.ReloadFrom(cfgFile)
	if err == nil || !strings.Contains(err.Error(), "pools[0].tls.ca_file") || !strings.Contains(err.Error(), "relative path") {
		t.Fatalf("reload with the CA file gone: %v", err)
	}
	e.mustDial("/room/still").Close()
	e.waitZero()
}

// startStdNodeTLS runs the h2 package's interop node serving TLS (HTTP/2
// and HTTP/1.1 by ALPN) with a certificate from ca, and returns it with
// its address once it answers.
func startStdNodeTLS(t *testing.T, ca *nodeCA) (*testproc.Proc, string) {
	t.Helper()
	leaf, err := ca.Server("relay.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.WriteFiles(ca.dir, "stdnode")
	if err != nil {
		t.Fatal(err)
	}
	addr := testproc.FreeAddr(t)
	p := execStdNode(t, addr, "-tls-cert", certFile, "-tls-key", keyFile)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}, Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for range 200 {
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, addr
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("stdnode at %s never answered over TLS", addr)
	return nil, ""
}

// TestTLSNodeH2 carries many clients' WebSockets as streams of two
// HTTP/2 connections over TLS (ALPN h2) to a node built on net/http:
// each echoes, the node's probes pass over TLS, and a reload that reads
// a CA file of other contents replaces the node's connections while
// their streams run on; one that reads the same contents keeps them.
// When the node dies, the clients on both get 1012.
func TestTLSNodeH2(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	node, addr := startStdNodeTLS(t, ca)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgText := fmt.Sprintf(tlsPoolConf("protocol = \"h2\"\nh2_connections = 2", fmt.Sprintf("  ca_file = %q\n", caFile), addr), "127.0.0.1:0")
	cfgFile := filepath.Join(dir, "wsgate.toml")
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 0, strings.ReplaceAll(cfgText, "127.0.0.1:0", "%[1]s"))
	e.waitProbe(addr, "ok")

	const n = 20
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = e.mustDial("/ws")
	}
	s := e.h2Set(addr)
	if st := s.Stats(); st.Conns != 2 || st.Streams != n {
		t.Errorf("set %+v, want 2 connections carrying %d streams", st, n)
	}
	echoAll := func() {
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				for j := range 10 {
					msg := strings.Repeat(fmt.Sprintf("%d-%d.", i, j), 1+j*100)
					if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
						t.Errorf("client %d: write: %v", i, err)
						return
					}
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
						t.Errorf("client %d: read %d bytes, %v", i, len(got), err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	echoAll()

	// The same contents: the connections stay.
	if err := e.srv.ReloadFrom(cfgFile); err != nil {
		t.Fatal(err)
	}
	if e.h2Set(addr) != s {
		t.Error("a reload that read the same CA file replaced the node's connections")
	}
	// Other contents (a second CA beside the first): a new set; the
	// streams on the old one run on.
	other := newNodeCA(t, "next CA")
	if err := os.WriteFile(caFile, append(ca.PEM(), other.PEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.ReloadFrom(cfgFile); err != nil {
		t.Fatal(err)
	}
	if e.h2Set(addr) == s {
		t.Fatal("a reload that read another CA file kept the node's connections")
	}
	echoAll()
	c := e.mustDial("/ws")
	if st := e.h2Set(addr).Stats(); st.Streams != 1 {
		t.Errorf("new set %+v, want the new client's stream", st)
	}
	// The node dies: every client of both sets gets 1012.
	if err := node.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(conns, c) {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1012) {
			t.Errorf("want close 1012 from a node that died, got %v", err)
		}
		c.Close()
	}
	e.waitZero()
}

// TestTLSNodeH2WithoutALPN puts a node that serves HTTP/1.1 over TLS only
// (no ALPN h2) in an "h2" pool: the handshake fails with 502 and the node
// is charged with it, as a node without extended CONNECT is.
func TestTLSNodeH2WithoutALPN(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	rs := startTLSRelays(t, 1, &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}})
	addr := rs.addrs[0]
	e := newEnv(t, 0, tlsPoolConf("protocol = \"h2\"", caLine(ca), addr))
	_, resp, err := e.dial("/room/h2", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("want 502, got %v %v", resp, err)
	}
	if n := e.passiveFailures(addr); n != 1 {
		t.Errorf("the node has %d failures in a row, want 1", n)
	}
}

// proxyTLSListener is a node's listener that reads a PROXY header in the
// clear from each connection, then serves TLS, as a node behind HAProxy's
// "send-proxy-v2 ssl" does. It counts the headers by kind.
type proxyTLSListener struct {
	net.Listener
	cfg           *tls.Config
	local, client atomic.Int32
}

func (l *proxyTLSListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		b, _ := br.Peek(16)
		if len(b) == 16 {
			b, _ = br.Peek(16 + int(b[14])<<8 + int(b[15]))
		}
		h, k, err := proxyproto.Parse(b)
		if err != nil {
			c.Close()
			continue
		}
		_, _ = br.Discard(k)
		_ = c.SetReadDeadline(time.Time{})
		if h.Local {
			l.local.Add(1)
		} else {
			l.client.Add(1)
		}
		return tls.Server(&bufConn{c, br}, l.cfg), nil
	}
}

// bufConn is a connection read through a reader holding bytes of it.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// TestTLSNodeSendProxy checks send_proxy_v2 with [pools.tls]: the PROXY
// header goes in the clear before TLS on a tunnel's connection (the
// client's address), a plain request's and a probe's (LOCAL).
func TestTLSNodeSendProxy(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := &proxyTLSListener{Listener: ln, cfg: &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}}}
	mem := bus.NewMemory()
	r := relay.New(relay.Options{ID: "proxied", Bus: mem.Endpoint(), Logger: quietLog()})
	go func() { _ = r.Serve(pl) }()
	t.Cleanup(func() { _ = r.Close(context.Background()); _ = mem.Close() })
	addr := ln.Addr().String()

	e := newEnv(t, 0, tlsPoolConf("send_proxy_v2 = true", caLine(ca), addr))
	e.waitProbe(addr, "ok")
	if pl.local.Load() == 0 {
		t.Error("the probes sent no LOCAL header")
	}
	a, b := e.roomPair("proxied")
	if n := pl.client.Load(); n != 2 {
		t.Errorf("%d PROXY headers with a client's address, want 2 (one per tunnel)", n)
	}
	resp, err := http.Get("http://" + e.gw + "/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || pl.client.Load() != 3 {
		t.Errorf("GET /info: %d, with %d client headers in all, want 200 and 3", resp.StatusCode, pl.client.Load())
	}
	http.DefaultClient.CloseIdleConnections()
	a.Close()
	b.Close()
	e.waitZero()
}

// TestCheckTLSReadsPoolFiles checks that `wsgate -check` (CheckTLS) reads
// the [pools.tls] files as a start would: a CA file that is gone is a
// config error at its key.
func TestCheckTLSReadsPoolFiles(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	src := fmt.Sprintf(tlsPoolConf("", caLine(ca), "127.0.0.1:1"), "127.0.0.1:0")
	cfg, err := conf.Parse("check.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckTLS(cfg); err != nil {
		t.Fatalf("CheckTLS with the CA file in place: %v", err)
	}
	if err := os.Remove(ca.file); err != nil {
		t.Fatal(err)
	}
	err = CheckTLS(cfg)
	var ce *conf.Error
	if !errors.As(err, &ce) || ce.Key != "pools[0].tls.ca_file" || ce.Line == 0 {
		t.Fatalf("CheckTLS with the CA file gone: %v, want a config error at pools[0].tls.ca_file", err)
	}
}

// TestTLSNodeH2Relay runs an "h2" pool over TLS to relay-backend's relays
// (their listener behind TLS offering ALPN h2 and http/1.1): a room's
// members on few HTTP/2 connections over TLS exchange messages, and the
// relay's health answers the probes over TLS.
func TestTLSNodeH2Relay(t *testing.T) {
	ca := newNodeCA(t, "nodes CA")
	rs := startTLSRelays(t, 1, &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}, NextProtos: []string{"h2", "http/1.1"}})
	addr := rs.addrs[0]
	e := newEnv(t, 0, tlsPoolConf("protocol = \"h2\"\nh2_connections = 1", caLine(ca), addr))
	e.waitProbe(addr, "ok")
	a, b := e.roomPair("h2-tls")
	relayMessage(t, b, a, "and back")
	if st := e.h2Set(addr).Stats(); st.Conns != 1 || st.Streams != 2 {
		t.Errorf("set %+v, want one connection carrying both members", st)
	}
	a.Close()
	b.Close()
	e.waitZero()
}
