// Package pebbletest starts a throwaway ACME server for tests: Debian's
// pebble (Let's Encrypt's test CA), validating challenges for real
// against the ports a test names, with a DNS server of the test's own
// that points every name at 127.0.0.1. The process is stopped by its PID
// when the test ends.
package pebbletest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/wsgate/wsgate/internal/testca"
)

// Binary is the pebble executable.
const Binary = "pebble"

// Options are a pebble's settings.
type Options struct {
	// HTTPPort and TLSPort are where pebble validates http-01 and
	// tls-alpn-01 challenges, on 127.0.0.1 (the DNS answer).
	HTTPPort, TLSPort int
	// Validity is the life of the certificates it issues (0: pebble's
	// default, five years); whole seconds.
	Validity time.Duration
}

// Pebble is one pebble process. It is not safe for concurrent use.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// CAFile is a PEM file of the CA of pebble's own HTTPS listeners.
	CAFile string
	mgmt   string // management listener, host:port
	client *http.Client
	cmd    *exec.Cmd
	log    string
}

// Start runs pebble on free loopback ports with a DNS server of its own
// answering A 127.0.0.1 for every name, and waits until its directory
// answers. When pebble is missing it skips the test, unless
// WSGATE_REQUIRE_PEBBLE is set (CI sets it), where a skip would hide a
// missing install.
func Start(tb testing.TB, o Options) *Pebble {
	tb.Helper()
	Require(tb, Binary)
	dnsAddr := StartDNS(tb)
	dir := tb.TempDir()
	ca, err := testca.New("pebbletest")
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := ca.Server("localhost", "127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile, err := leaf.WriteFiles(dir, "pebble")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Pebble{CAFile: filepath.Join(dir, "ca.pem"), log: filepath.Join(dir, "pebble.log")}
	if err := os.WriteFile(p.CAFile, ca.PEM(), 0o644); err != nil {
		tb.Fatal(err)
	}
	listen, mgmt := freeAddr(tb), freeAddr(tb)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  listen,
		"managementListenAddress":        mgmt,
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       o.HTTPPort,
		"tlsPort":                        o.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"certificateValidityPeriod":      uint64(o.Validity / time.Second),
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	p.Directory, p.mgmt = "https://"+listen+"/dir", mgmt
	p.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	out, err := os.Create(p.log)
	if err != nil {
		tb.Fatal(err)
	}
	p.cmd = exec.Command(Binary, "-config", cfgFile, "-dnsserver", dnsAddr)
	// Real validation, without pebble's random sleeps, every authorization
	// validated anew (none reused), no nonce refused at random.
	// PEBBLE_VA_ALWAYS_VALID, which would skip validation, is dropped
	// should the environment carry it.
	env := []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_AUTHZREUSE=0", "PEBBLE_WFE_NONCEREJECT=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PEBBLE_") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Stop()
		_ = out.Close()
		if tb.Failed() {
			tb.Logf("pebble log:\n%s", p.Log())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := p.client.Get(p.Directory)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pebble's directory did not answer within 10s: %v\n%s", err, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Require skips the test when one of the programs is not installed
// (pebble's package brings pebble and pebble-challtestsrv), unless
// WSGATE_REQUIRE_PEBBLE is set (CI sets it), where it fails it: a skip
// would hide a missing install.
func Require(tb testing.TB, programs ...string) {
	tb.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("WSGATE_REQUIRE_PEBBLE") != "" {
				tb.Fatalf("%s not found and WSGATE_REQUIRE_PEBBLE is set: apt-get install pebble (make deps)", p)
			}
			tb.Skipf("%s not installed (apt-get install pebble, or make deps); set WSGATE_REQUIRE_PEBBLE=1 to fail instead", p)
		}
	}
}

// FreeUDPPort is a free loopback UDP port, for a DNS server a test starts
// later.
func FreeUDPPort(tb testing.TB) int {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// Stop ends pebble (SIGKILL, by its PID) and waits for it; the ACME
// server is then down. Stopping twice is a no-op.
func (p *Pebble) Stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// Log is what pebble printed so far.
func (p *Pebble) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Roots is the pool of pebble's root CA, which its certificates chain to
// (through the intermediate the gateway serves with them).
func (p *Pebble) Roots(tb testing.TB) *x509.CertPool {
	tb.Helper()
	resp, err := p.client.Get("https://" + p.mgmt + "/roots/0")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	pem, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		tb.Fatalf("pebble's root is not PEM: %q", pem)
	}
	return pool
}

// StartDNS runs a DNS server on a free loopback UDP port that answers
// every A question with 127.0.0.1 and every other with no records, and
// returns its address. It stops when the test ends.
func StartDNS(tb testing.TB) string {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answer)}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// answer is the DNS server's handler.
func answer(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	for _, qu := range q.Question {
		if qu.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: qu.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
				A:   net.IPv4(127, 0, 0, 1),
			})
		}
	}
	_ = w.WriteMsg(m)
}

// freeAddr is a free loopback host:port.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// FreePort is a free loopback TCP port, for a listener a test opens later.
func FreePort(tb testing.TB) int {
	tb.Helper()
	_, p, _ := net.SplitHostPort(freeAddr(tb))
	var n int
	_, _ = fmt.Sscan(p, &n)
	return n
}
