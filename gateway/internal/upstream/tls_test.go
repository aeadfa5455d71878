package upstream

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/proxyproto"
	"github.com/wsgate/wsgate/internal/testca"
)

// tlsNode is a TLS node on loopback: it reads an optional PROXY header
// in the clear, runs the server side of TLS, reports what it saw on seen,
// and echoes one line.
type tlsNode struct {
	addr string
	seen chan nodeSaw
}

// nodeSaw is what tlsNode saw of one connection.
type nodeSaw struct {
	proxy      bool   // a PROXY header came before TLS
	serverName string // SNI
	resumed    bool
	alpn       string
	peerCerts  int
	err        error // of the handshake
}

// startTLSNode serves cfg on a loopback port; proxy says a PROXY header
// comes first on each connection.
func startTLSNode(t *testing.T, cfg *tls.Config, proxy bool) *tlsNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &tlsNode{addr: ln.Addr().String(), seen: make(chan nodeSaw, 16)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				var saw nodeSaw
				br := bufio.NewReader(c)
				if proxy {
					b, _ := br.Peek(16)
					if _, k, err := proxyproto.Parse(b); err == nil {
						saw.proxy = true
						_, _ = br.Discard(k)
					}
				}
				tc := tls.Server(readerConn{c, br}, cfg)
				saw.err = tc.Handshake()
				st := tc.ConnectionState()
				saw.serverName, saw.resumed, saw.alpn, saw.peerCerts = st.ServerName, st.DidResume, st.NegotiatedProtocol, len(st.PeerCertificates)
				n.seen <- saw
				if saw.err != nil {
					return
				}
				line, _ := bufio.NewReader(tc).ReadString('\n')
				_, _ = io.WriteString(tc, line)
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return n
}

// readerConn is a connection whose reads go through a reader that may
// hold bytes already read from it.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// tlsFixture is a CA, a node certificate it issued for 127.0.0.1 and
// node.test, and the CA written to a file.
type tlsFixture struct {
	ca     *testca.CA
	node   tls.Certificate
	caFile string
	dir    string
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	ca, err := testca.New("nodes CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("node.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return &tlsFixture{ca: ca, node: leaf.TLS(), caFile: caFile, dir: dir}
}

// tlsPool builds a pool of the node at addr with the [pools.tls] table
// tlsTable (its text), through conf and LoadTLS as the gateway does.
func tlsPool(t *testing.T, addr, tlsTable string, extra string) *Pool {
	t.Helper()
	src := fmt.Sprintf("[[pools]]\nname = \"relay\"\n%s\n  [pools.tls]\n%s\n  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"relay\"\n", extra, tlsTable, addr)
	cfg, err := conf.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	nt, err := LoadTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, _, _, err := NewPool(&cfg.Pools[0], nt["relay"], nil, balancer.NewRegistry(), quietLog(), nil, func(int, int) Admission { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// echo sends a line on c and reads it back.
func echo(t *testing.T, c net.Conn) {
	t.Helper()
	if err := tryEcho(c); err != nil {
		t.Fatal(err)
	}
}

// tryEcho sends a line on c and reads it back.
func tryEcho(c net.Conn) error {
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != "hello\n" {
		return fmt.Errorf("echo: %q", got)
	}
	return nil
}

// TestDialNodeTLS dials TLS nodes as every connection of a pool with
// [pools.tls] is dialed: verified against ca_file, the node's IP verified
// against the certificate's IP addresses without SNI, or server_name
// sent and verified; the second dial resumes the first's session.
func TestDialNodeTLS(t *testing.T) {
	f := newTLSFixture(t)
	node := startTLSNode(t, &tls.Config{Certificates: []tls.Certificate{f.node}, NextProtos: []string{ALPNHTTP1}}, false)
	for _, tc := range []struct {
		name, table, sni string
	}{
		{"ip", fmt.Sprintf("  ca_file = %q", f.caFile), ""},
		{"server_name", fmt.Sprintf("  ca_file = %q\n  server_name = \"node.test\"", f.caFile), "node.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tlsPool(t, node.addr, tc.table, "")
			for i := range 2 {
				c, err := p.DialNode(node.addr, nil, ALPNHTTP1, nil)
				if err != nil {
					t.Fatalf("dial %d: %v", i, err)
				}
				saw := <-node.seen
				if saw.err != nil || saw.serverName != tc.sni || saw.alpn != ALPNHTTP1 {
					t.Errorf("dial %d: the node saw %+v, want SNI %q and ALPN http/1.1", i, saw, tc.sni)
				}
				if saw.resumed != (i == 1) {
					t.Errorf("dial %d: resumed %v", i, saw.resumed)
				}
				echo(t, c)
				c.Close()
			}
		})
	}
}

// TestDialNodeTLSRefused checks the handshakes that must fail: a node
// certificate from a CA the pool does not trust (the system's roots
// included), a server_name the certificate does not name, a node that
// does not select h2 for an HTTP/2 connection, and one that asks for a
// client certificate the pool has none of (in TLS 1.3 the client learns
// it at its first read, as DialNode reads the node's 101); with cert_file
// and key_file, that node takes the gateway.
func TestDialNodeTLSRefused(t *testing.T) {
	f := newTLSFixture(t)
	clientLeaf, err := f.ca.Client("gateway", "", "")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := clientLeaf.WriteFiles(f.dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	plain := startTLSNode(t, &tls.Config{Certificates: []tls.Certificate{f.node}}, false)
	strict := startTLSNode(t, &tls.Config{Certificates: []tls.Certificate{f.node}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: f.ca.Pool()}, false)
	ca := fmt.Sprintf("  ca_file = %q\n", f.caFile)
	for _, tc := range []struct {
		name, table, alpn string
		node              *tlsNode
		want              string // in the error; "" for success
	}{
		{"system roots", "", ALPNHTTP1, plain, "certificate signed by unknown authority"},
		{"wrong server_name", ca + `  server_name = "other.test"`, ALPNHTTP1, plain, "not other.test"},
		{"no h2", ca, ALPNH2, plain, ErrNoALPNH2.Error()},
		{"no client certificate", ca, ALPNHTTP1, strict, "certificate required"},
		{"client certificate", ca + fmt.Sprintf("  cert_file = %q\n  key_file = %q", certFile, keyFile), ALPNHTTP1, strict, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tlsPool(t, tc.node.addr, tc.table, "")
			c, err := p.DialNode(tc.node.addr, nil, tc.alpn, nil)
			if err == nil && tc.want != "" {
				err = tryEcho(c) // a TLS 1.3 server's refusal comes after the handshake
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				echo(t, c)
				c.Close()
				if saw := <-tc.node.seen; saw.peerCerts != 1 {
					t.Errorf("the node saw %d client certificates", saw.peerCerts)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one saying %q", err, tc.want)
			}
			if tc.alpn == ALPNH2 && !errors.Is(err, ErrNoALPNH2) {
				t.Errorf("error %v is not ErrNoALPNH2", err)
			}
			<-tc.node.seen
		})
	}
}

// TestDialNodeTLSProxyHeader checks that a send_proxy_v2 pool's PROXY
// header goes in the clear before the TLS handshake, as HAProxy sends it.
func TestDialNodeTLSProxyHeader(t *testing.T) {
	f := newTLSFixture(t)
	node := startTLSNode(t, &tls.Config{Certificates: []tls.Certificate{f.node}}, true)
	p := tlsPool(t, node.addr, fmt.Sprintf("  ca_file = %q", f.caFile), "send_proxy_v2 = true")
	c, err := p.DialNode(node.addr, proxyproto.AppendLocalV2(nil), ALPNHTTP1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if saw := <-node.seen; !saw.proxy || saw.err != nil {
		t.Fatalf("the node saw %+v, want a PROXY header, then TLS", saw)
	}
	echo(t, c)
}

// TestLoadTLSErrors checks that a [pools.tls] file that cannot be used is
// a config error naming the file, line and key.
func TestLoadTLSErrors(t *testing.T) {
	f := newTLSFixture(t)
	notPEM := filepath.Join(f.dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(f.dir, "missing.pem")
	for _, tc := range []struct {
		name, table, key, want string
	}{
		{"missing ca_file", fmt.Sprintf("  ca_file = %q", missing), "pools[0].tls.ca_file", "no such file"},
		{"ca_file not PEM", fmt.Sprintf("  ca_file = %q", notPEM), "pools[0].tls.ca_file", "holds no PEM certificate"},
		{"missing key_file", fmt.Sprintf("  cert_file = %q\n  key_file = %q", f.caFile, missing), "pools[0].tls.key_file", "no such file"},
		{"cert_file not a pair", fmt.Sprintf("  cert_file = %q\n  key_file = %q", f.caFile, notPEM), "pools[0].tls.cert_file", "load "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "[[pools]]\nname = \"relay\"\n  [pools.tls]\n" + tc.table + "\n  [[pools.nodes]]\n  addr = \"127.0.0.1:1\"\n[[routes]]\npool = \"relay\"\n"
			cfg, err := conf.Parse("test.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			_, err = LoadTLS(cfg)
			var ce *conf.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *conf.Error", err)
			}
			if ce.File != "test.toml" || ce.Line == 0 || ce.Key != tc.key || !strings.Contains(ce.Msg, tc.want) {
				t.Errorf("error %q, want test.toml, a line, key %s and %q", err, tc.key, tc.want)
			}
		})
	}
}

// TestNewPoolKeepsSameTLS checks that a reload that read the same files
// keeps the pool's NodeTLS (its sessions) less the configs of nodes no
// longer in the pool, and one that read others does not.
func TestNewPoolKeepsSameTLS(t *testing.T) {
	f := newTLSFixture(t)
	load := func() *conf.Config {
		src := fmt.Sprintf("[[pools]]\nname = \"relay\"\n  [pools.tls]\n  ca_file = %q\n  [[pools.nodes]]\n  addr = \"127.0.0.1:1\"\n[[routes]]\npool = \"relay\"\n", f.caFile)
		cfg, err := conf.Parse("test.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	reg := balancer.NewRegistry()
	build := func(old *Pool) *Pool {
		cfg := load()
		nt, err := LoadTLS(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p, _, _, err := NewPool(&cfg.Pools[0], nt["relay"], old, reg, quietLog(), nil, func(int, int) Admission { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := build(nil)
	defer a.Close()
	a.TLS.Config("127.0.0.1:1", ALPNHTTP1)
	a.TLS.Config("127.0.0.1:2", ALPNHTTP1) // a node gone since, say discovered
	if b := build(a); b.TLS != a.TLS {
		t.Error("same files read again: the pool's TLS must be kept")
	}
	a.TLS.mu.Lock()
	kept := len(a.TLS.nodes)
	a.TLS.mu.Unlock()
	if kept != 1 {
		t.Errorf("the kept TLS holds %d node configs, want 1: the gone node's must be dropped", kept)
	}
	other, err := testca.New("renewed CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.caFile, other.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := build(a); c.TLS == a.TLS || c.TLS.Same(a.TLS) {
		t.Error("a renewed CA file must give the pool new TLS settings")
	}
}
