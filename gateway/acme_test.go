package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/pebbletest"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// acmePorts are the gateway's listener ports an ACME test fixes, since
// pebble validates on them.
type acmePorts struct{ plain, tls int }

func newACMEPorts(t *testing.T) acmePorts {
	return acmePorts{pebbletest.FreePort(t), pebbletest.FreePort(t)}
}

// acmeGatewayConfig is a newEnv config with the listeners on ports (shared
// by gateways with reuse_port) and acme as the [gateway.tls.acme] body;
// files, if not "", are [[gateway.tls.certificates]] entries.
func acmeGatewayConfig(ports acmePorts, acme, files string) string {
	return fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:%d"
reuse_port = true
drain_window = "100ms"
drain_timeout = "5s"
  [gateway.tls]
  listen = "127.0.0.1:%d"
%s
  [gateway.tls.acme]
%s
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %%[2]q
[[routes]]
pool = "relay"
# %%[1]s
`, ports.plain, ports.tls, files, acme)
}

// startACMEEnv starts pebble for ports and returns it with the
// [gateway.tls.acme] lines that point at it.
func startACMEEnv(t *testing.T, ports acmePorts, validity time.Duration) (*pebbletest.Pebble, string) {
	p := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports.plain, TLSPort: ports.tls, Validity: validity})
	return p, fmt.Sprintf("  directory = %q\n  ca_file = %q\n  email = \"ops@wsgate.test\"\n", p.Directory, p.CAFile)
}

// shortRenewCheck makes ACME renewal checks frequent for the test.
func shortRenewCheck(t *testing.T) {
	old := acmeRenewCheck
	acmeRenewCheck = 200 * time.Millisecond
	t.Cleanup(func() { acmeRenewCheck = old })
}

// handshakeLeaf is the certificate the TLS listener at addr serves for
// serverName, or the handshake's error.
func handshakeLeaf(addr, serverName string) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: serverName, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// waitACMELeaf waits (up to 30s) until addr serves a pebble certificate
// for name, and returns it.
func waitACMELeaf(t *testing.T, addr, name string) *x509.Certificate {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaf, err := handshakeLeaf(addr, name)
		if err == nil && strings.Contains(leaf.Issuer.CommonName, "Pebble") {
			return leaf
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ACME certificate for %s at %s within 30s (last: %v)", name, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counterSum sums a counter vector's series whose label equals value.
func counterSum(t *testing.T, c *prometheus.CounterVec, value string) float64 {
	t.Helper()
	return counterValue(t, c.WithLabelValues(value))
}

// gaugeOf reads wsgate_tls_certificate_expiry_seconds for name from reg.
func expiryOf(t *testing.T, s *Server, name string) (float64, bool) {
	t.Helper()
	mfs, err := s.metrics.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wsgate_tls_certificate_expiry_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "name", name) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func labelIs(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// roomExchange sends msg from c to partner (both in one relay room) and back,
// and waits for each.
func roomExchange(t *testing.T, c, partner *websocket.Conn, msg string) {
	t.Helper()
	for _, dir := range [][2]*websocket.Conn{{c, partner}, {partner, c}} {
		if err := dir[0].WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatalf("write: %v", err)
		}
		_ = dir[1].SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, b, err := dir[1].ReadMessage()
			if err != nil {
				t.Fatalf("read %q: %v", msg, err)
			}
			if string(b) == msg {
				break
			}
		}
	}
}

// TestACMEObtainsAtStartAndServesBySNI has a gateway obtain certificates
// for two domains from pebble at start, validated for real on its own
// listeners, and serve each by SNI (verified against pebble's root),
// while a name a certificate file covers is served from the file; a wss
// tunnel runs over an ACME certificate; /api/tls and the expiry metric
// show both sources.
func TestACMEObtainsAtStartAndServesBySNI(t *testing.T) {
	ports := newACMEPorts(t)
	p, table := startACMEEnv(t, ports, 0)
	files := newTLSFiles(t) // certs[2]: a.example.test
	table += fmt.Sprintf("  domains = [\"one.acme.test\", \"two.acme.test\"]\n  storage = %q\n", t.TempDir())
	fileTable := fmt.Sprintf("  [[gateway.tls.certificates]]\n  cert_file = %q\n  key_file = %q\n", files.certs[2][0], files.certs[2][1])
	e := newEnv(t, 1, acmeGatewayConfig(ports, table, fileTable))
	tlsAddr := e.srv.TLSAddr().String()
	roots := p.Roots(t)
	for _, name := range []string{"one.acme.test", "two.acme.test"} {
		leaf := waitACMELeaf(t, tlsAddr, name)
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: intermediates(t, tlsAddr, name)}); err != nil {
			t.Errorf("%s: served certificate does not verify: %v", name, err)
		}
	}
	if leaf, err := handshakeLeaf(tlsAddr, "a.example.test"); err != nil || leaf.Issuer.CommonName == "" || strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Errorf("a.example.test (a file's name) served %v, %v; want the file's certificate", leaf, err)
	}
	if got := counterSum(t, e.srv.acme.orders, "ok"); got != 2 {
		t.Errorf("wsgate_tls_orders_total{result=ok} = %v, want 2", got)
	}
	c, _, err := wssDial(tlsAddr, "/room/acme", &tls.Config{ServerName: "one.acme.test", RootCAs: roots})
	if err != nil {
		t.Fatalf("wss over the ACME certificate: %v", err)
	}
	partner := e.mustDial("/room/acme")
	roomExchange(t, c, partner, "over acme")
	c.Close()
	partner.Close()
	// A stranger posing as the CA's tls-alpn-01 validation, with no
	// challenge pending, gets no certificate.
	if _, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", tlsAddr,
		&tls.Config{ServerName: "one.acme.test", NextProtos: []string{"acme-tls/1"}, InsecureSkipVerify: true}); err == nil {
		t.Error("an acme-tls/1 handshake with no challenge pending succeeded")
	}
	// An http-01 path with a token nobody presented is answered by the
	// gateway, never proxied to the relay.
	resp, err := http.Get("http://" + e.gw + "/.well-known/acme-challenge/not-a-token")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "no such ACME challenge") {
		t.Errorf("unknown http-01 token: %d %q, want the gateway's own 404", resp.StatusCode, body)
	}
	sources := map[string]int{}
	for _, cert := range e.srv.tlsCertificates() {
		sources[cert.Source]++
		if cert.ExpiresIn <= 0 || cert.Issuer == "" || len(cert.Names) == 0 {
			t.Errorf("/api/tls entry %+v", cert)
		}
	}
	if sources["file"] != 1 || sources["acme"] != 2 {
		t.Errorf("/api/tls sources %v, want 1 file and 2 acme", sources)
	}
	for _, name := range []string{"one.acme.test", "a.example.test"} {
		if v, ok := expiryOf(t, e.srv, name); !ok || v <= 0 {
			t.Errorf("wsgate_tls_certificate_expiry_seconds{name=%q} = %v, %v", name, v, ok)
		}
	}
}

// intermediates is the chain the listener serves for name, past its leaf.
func intermediates(t *testing.T, addr, name string) *x509.CertPool {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool := x509.NewCertPool()
	for _, cert := range c.ConnectionState().PeerCertificates[1:] {
		pool.AddCert(cert)
	}
	return pool
}

// renewRuns numbers the runs of TestACMERenewalKeepsTunnels.
var renewRuns atomic.Int32

// TestACMERenewalKeepsTunnels renews a short-lived certificate while a
// wss tunnel over it stays up and still echoes after the renewal; then,
// with pebble down, a renewal fails, is counted as such, and the
// certificate in force keeps being served.
func TestACMERenewalKeepsTunnels(t *testing.T) {
	shortRenewCheck(t)
	ports := newACMEPorts(t)
	p, table := startACMEEnv(t, ports, 6*time.Second)
	// certmagic keeps a failed renewal's backoff per name for the
	// process: a name of its own for each run of the test.
	name := fmt.Sprintf("renew%d.acme.test", renewRuns.Add(1))
	table += fmt.Sprintf("  domains = [%q]\n  storage = %q\n", name, t.TempDir())
	e := newEnv(t, 1, acmeGatewayConfig(ports, table, ""))
	tlsAddr := e.srv.TLSAddr().String()
	first := waitACMELeaf(t, tlsAddr, name)
	c, _, err := wssDial(tlsAddr, "/room/renew", &tls.Config{ServerName: name, RootCAs: p.Roots(t)})
	if err != nil {
		t.Fatalf("wss: %v", err)
	}
	defer c.Close()
	partner := e.mustDial("/room/renew")
	defer partner.Close()
	roomExchange(t, c, partner, "before renewal")
	waitUntilWithin(t, 30*time.Second, func() bool { return counterSum(t, e.srv.acme.renewals, "ok") >= 1 })
	waitUntilWithin(t, 10*time.Second, func() bool {
		leaf, err := handshakeLeaf(tlsAddr, name)
		return err == nil && leaf.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	roomExchange(t, c, partner, "after renewal") // the tunnel opened over the old certificate

	p.Stop()
	waitUntilWithin(t, 30*time.Second, func() bool { return counterSum(t, e.srv.acme.renewals, "error") >= 1 })
	leaf, err := handshakeLeaf(tlsAddr, name)
	if err != nil {
		t.Fatalf("handshake after a failed renewal: %v", err)
	}
	if leaf.SerialNumber.Cmp(first.SerialNumber) == 0 || !strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Errorf("after a failed renewal the listener serves serial %v, want the last one obtained (renewed at least once after %v)", leaf.SerialNumber, first.SerialNumber)
	}
	roomExchange(t, c, partner, "pebble down")
}

// waitUntilWithin polls cond until it holds or d passes.
func waitUntilWithin(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestACMEFleetOneOrder starts two gateways on one storage (a directory,
// then Redis), sharing their ports as a fleet behind one address would:
// both serve the certificate and one order was made between them. A
// gateway started again on the same storage serves it with no order.
func TestACMEFleetOneOrder(t *testing.T) {
	for _, kind := range []string{"dir", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ports := newACMEPorts(t)
			_, table := startACMEEnv(t, ports, 0)
			storage := t.TempDir()
			if kind == "redis" {
				storage = redistest.Start(t).URL()
			}
			name := "fleet-" + kind + ".acme.test"
			table += fmt.Sprintf("  domains = [%q]\n  storage = %q\n", name, storage)
			cfg := acmeGatewayConfig(ports, table, "")
			var a, b *env
			var wg sync.WaitGroup
			wg.Go(func() { a = newEnv(t, 1, cfg) })
			wg.Go(func() { b = newEnv(t, 1, cfg) })
			wg.Wait()
			if t.Failed() {
				return
			}
			tlsAddr := a.srv.TLSAddr().String()
			leaf := waitACMELeaf(t, tlsAddr, name) // from either gateway (one port)
			for _, g := range []*env{a, b} {
				waitUntilWithin(t, 30*time.Second, func() bool { return len(g.srv.acme.m.Certificates()) == 1 })
			}
			orders := counterSum(t, a.srv.acme.orders, "ok") + counterSum(t, b.srv.acme.orders, "ok")
			failed := counterSum(t, a.srv.acme.orders, "error") + counterSum(t, b.srv.acme.orders, "error")
			if orders != 1 || failed != 0 {
				t.Errorf("orders by the fleet: %v ok, %v failed; want 1 and 0", orders, failed)
			}
			_ = a.srv.Shutdown(context.Background())
			_ = b.srv.Shutdown(context.Background())

			c := newEnv(t, 1, cfg) // a restart
			again := waitACMELeaf(t, c.srv.TLSAddr().String(), name)
			if !again.Equal(leaf) {
				t.Errorf("after a restart the gateway serves serial %v, want the stored %v", again.SerialNumber, leaf.SerialNumber)
			}
			if n := counterSum(t, c.srv.acme.orders, "ok") + counterSum(t, c.srv.acme.orders, "error"); n != 0 {
				t.Errorf("the restarted gateway made %v orders, want 0", n)
			}
		})
	}
}

// TestACMEOnDemandAsk runs on-demand issuance behind an ask URL: a name
// it approves gets a certificate at its first handshake; a name it
// refuses, and a name it never answers for (the call times out), get no
// order and a failed handshake; a flood of strangers' names reaches the
// ask URL no faster than on_demand_rate allows.
func TestACMEOnDemandAsk(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, ports, 0)
	var asked atomic.Int32
	hang := make(chan struct{})
	defer close(hang)
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		switch r.URL.Query().Get("domain") {
		case "yes.acme.test":
		case "hang.acme.test":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer ask.Close()
	table += fmt.Sprintf("  storage = %q\n  on_demand = true\n  ask = %q\n  ask_timeout = \"300ms\"\n  on_demand_rate = 1\n  on_demand_burst = 5\n", t.TempDir(), ask.URL)
	e := newEnv(t, 1, acmeGatewayConfig(ports, table, ""))
	tlsAddr := e.srv.TLSAddr().String()
	od := e.srv.acme.onDemand

	if _, err := handshakeLeaf(tlsAddr, "no.acme.test"); err == nil {
		t.Error("handshake for a name the ask URL refuses succeeded")
	}
	if _, err := handshakeLeaf(tlsAddr, "hang.acme.test"); err == nil {
		t.Error("handshake for a name the ask URL never answers succeeded")
	}
	if got := counterSum(t, od, "refused"); got != 2 {
		t.Errorf("wsgate_tls_on_demand_total{result=refused} = %v, want 2", got)
	}
	leaf := waitACMELeaf(t, tlsAddr, "yes.acme.test")
	if !slicesContain(leaf.DNSNames, "yes.acme.test") {
		t.Errorf("on-demand certificate names %v", leaf.DNSNames)
	}
	if got := counterSum(t, e.srv.acme.orders, "ok") + counterSum(t, e.srv.acme.orders, "error"); got != 1 {
		t.Errorf("orders = %v, want 1 (the approved name only)", got)
	}

	// A stranger's flood of names: 60 handshakes at once, each a new name.
	before := asked.Load()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() { _, _ = handshakeLeaf(tlsAddr, fmt.Sprintf("flood%d.acme.test", i)) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	calls := float64(asked.Load() - before)
	// The bucket held at most its burst, and refilled at 1 a second.
	if bound := 5 + elapsed.Seconds()*1 + 1; calls > bound {
		t.Errorf("the flood made %v ask calls in %s, over the bucket's %v", calls, elapsed, bound)
	}
	t.Logf("flood: 60 handshakes with new names in %s made %v ask calls; %v refused by the rate, %v by ask",
		elapsed, calls, counterSum(t, od, "rate"), counterSum(t, od, "refused")-2)
	if counterSum(t, od, "rate") == 0 {
		t.Error("no name of the flood was refused by on_demand_rate")
	}
	if got := counterSum(t, e.srv.acme.orders, "ok") + counterSum(t, e.srv.acme.orders, "error"); got != 1 {
		t.Errorf("orders after the flood = %v, want still 1", got)
	}
	e.waitZero() // no handshake of the flood holds a connection slot
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestCheckTLSReadsACMECAFile pins what `wsgate -check` does with
// [gateway.tls.acme]: ca_file is read (an unreadable one is an error at
// its key), nothing is ordered and the storage is not touched.
func TestCheckTLSReadsACMECAFile(t *testing.T) {
	storage := t.TempDir() + "/never-made"
	cfg, err := conf.Parse("check.toml", []byte(fmt.Sprintf(`
[gateway.tls]
listen = "127.0.0.1:0"
  [gateway.tls.acme]
  directory = "https://127.0.0.1:1/dir"
  domains = ["check.acme.test"]
  storage = %q
  ca_file = "missing-ca.pem"
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"
[[routes]]
pool = "relay"
`, storage)))
	if err != nil {
		t.Fatal(err)
	}
	err = CheckTLS(cfg)
	var ce *conf.Error
	if !errors.As(err, &ce) || ce.Key != "gateway.tls.acme.ca_file" || ce.Line != 8 {
		t.Fatalf("CheckTLS = %v, want an error at gateway.tls.acme.ca_file, line 8", err)
	}
	if _, err := os.Stat(storage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the check touched the storage: %v", err)
	}
}

// TestACMERedisDownAtStart starts a gateway whose Redis storage is down:
// it says so and keeps trying, and once Redis is back it obtains the
// certificate without a restart (certmagic alone gives a name up for good
// when its storage cannot be read at start).
func TestACMERedisDownAtStart(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, ports, 0)
	rs := redistest.Start(t)
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	table += fmt.Sprintf("  domains = [\"late.acme.test\"]\n  storage = %q\n", rs.URL())
	var buf testproc.Buffer
	e := newEnvLog(t, 1, acmeGatewayConfig(ports, table, ""), jsonLog(&buf))
	// Two tries failed: the gateway keeps trying rather than give up.
	waitUntilWithin(t, 10*time.Second, func() bool { return strings.Count(buf.String(), "ACME storage unreachable") >= 2 })
	if _, err := handshakeLeaf(e.srv.TLSAddr().String(), "late.acme.test"); err == nil {
		t.Error("a certificate was served while its storage was down")
	}
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	waitACMELeaf(t, e.srv.TLSAddr().String(), "late.acme.test")
}

// TestACMEAddedByReload pins that a reload adding [gateway.tls.acme]
// (which applies at a restart) is refused when it would leave the TLS
// listener without a certificate file, and otherwise goes through with
// the change listed as needing a restart, the files still served.
func TestACMEAddedByReload(t *testing.T) {
	files := newTLSFiles(t)
	tlsAddr := testproc.FreeAddr(t)
	e := newEnv(t, 1, tlsGatewayConfig("", files.table(tlsAddr, ""), catchAll))
	acme := "  [gateway.tls.acme]\n  directory = \"https://127.0.0.1:1/dir\"\n  domains = [\"new.acme.test\"]\n  storage = \"" + t.TempDir() + "\"\n"
	load := func(tlsTable string) *conf.Config {
		t.Helper()
		cfg, err := conf.Parse("reload.toml", []byte(fmt.Sprintf(tlsGatewayConfig("", tlsTable, catchAll), e.gw, e.addrs[0])))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	err := e.srv.Apply(load(fmt.Sprintf("  [gateway.tls]\n  listen = %q\n", tlsAddr) + acme))
	var ce *conf.Error
	if !errors.As(err, &ce) || ce.Key != "gateway.tls.acme" {
		t.Fatalf("reload adding ACME without files: %v, want refused at gateway.tls.acme", err)
	}
	if err := e.srv.Apply(load(files.table(tlsAddr, "") + acme)); err != nil {
		t.Fatalf("reload adding ACME beside the files: %v", err)
	}
	if st := e.srv.LastReload(); !strings.Contains(fmt.Sprint(st), "gateway.tls.acme") {
		t.Errorf("last reload %+v does not say gateway.tls.acme needs a restart", st)
	}
	if leaf, err := handshakeLeaf(tlsAddr, "a.example.test"); err != nil || !leaf.Equal(files.leafs[2].Cert) {
		t.Errorf("after the reload a.example.test gets %v, %v; want its file", leaf, err)
	}
}

// TestACMETLSALPNWithClientCerts has pebble validate on the TLS listener
// only (its http-01 port has no listener, so that challenge fails and
// the order goes on with tls-alpn-01) while the listener requires client
// certificates: the validation's handshake is not asked for one, and the
// certificate is obtained.
func TestACMETLSALPNWithClientCerts(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, acmePorts{plain: pebbletest.FreePort(t), tls: ports.tls}, 0)
	files := newTLSFiles(t)
	caFile := files.dir + "/clients.pem"
	if err := os.WriteFile(caFile, files.ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	table += fmt.Sprintf("  domains = [\"alpn.acme.test\"]\n  storage = %q\n", t.TempDir())
	var buf testproc.Buffer
	e := newEnvLog(t, 1, acmeGatewayConfig(ports, table, fmt.Sprintf("  client_ca_file = %q\n", caFile)), jsonLog(&buf))
	// The order is counted as it completes; the certificate is cached
	// just after.
	waitUntilWithin(t, 30*time.Second, func() bool { return len(e.srv.acme.m.Certificates()) == 1 })
	if n := counterSum(t, e.srv.acme.orders, "ok"); n != 1 {
		t.Errorf("orders = %v, want 1", n)
	}
	if !strings.Contains(buf.String(), `"msg":"served key authentication certificate"`) || !strings.Contains(buf.String(), `"challenge":"tls-alpn-01"`) {
		t.Error("the log does not show a tls-alpn-01 validation answered")
	}
	certs := e.srv.acme.m.Certificates()
	if len(certs) != 1 || !strings.Contains(certs[0].Issuer, "Pebble") {
		t.Fatalf("ACME certificates %+v", certs)
	}
	// A client with a certificate of the clients' CA gets it by SNI.
	client, err := files.ca.Client("client", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", e.srv.TLSAddr().String(), &tls.Config{ServerName: "alpn.acme.test", InsecureSkipVerify: true,
		Certificates: []tls.Certificate{client.TLS()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0]; !got.Equal(certs[0].Leaf) {
		t.Errorf("served %v, want the ACME certificate", got.Subject)
	}
}

// TestACMEHTTP01Alone has pebble validate on the plain listener only (its
// tls-alpn-01 port has no listener): the certificate is obtained through
// http-01, answered before any route.
func TestACMEHTTP01Alone(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, acmePorts{plain: ports.plain, tls: pebbletest.FreePort(t)}, 0)
	table += fmt.Sprintf("  domains = [\"http01.acme.test\"]\n  storage = %q\n", t.TempDir())
	var buf testproc.Buffer
	e := newEnvLog(t, 1, acmeGatewayConfig(ports, table, ""), jsonLog(&buf))
	waitACMELeaf(t, e.srv.TLSAddr().String(), "http01.acme.test")
	if !strings.Contains(buf.String(), `"msg":"served key authentication"`) || !strings.Contains(buf.String(), `"challenge":"http-01"`) {
		t.Error("the log does not show an http-01 validation answered")
	}
}
