package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/fasthttp/websocket"
	"github.com/mholt/acmez/v3/acme"
	"github.com/wsgate/wsgate/internal/testproc"
)

// dialValidation opens a TLS connection to addr as an ACME CA's
// tls-alpn-01 validation does: ALPN "acme-tls/1" alone, serverName as
// SNI ("" sends none), no client certificate.
func dialValidation(addr, serverName string) (*tls.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: serverName, NextProtos: []string{"acme-tls/1"}, InsecureSkipVerify: true})
}

// plantTLSALPNChallenge puts a pending tls-alpn-01 challenge for name into
// the directory storage, where certmagic finds the challenges another
// gateway of the fleet presented: the gateway then answers a validation
// handshake for name with the challenge's certificate.
func plantTLSALPNChallenge(t *testing.T, storage, directory, name string) {
	t.Helper()
	b, err := json.Marshal(acme.Challenge{
		Type:             acme.ChallengeTypeTLSALPN01,
		Token:            "planted-token",
		KeyAuthorization: "planted-token.thumbprint",
		Identifier:       acme.Identifier{Type: "dns", Value: name},
	})
	if err != nil {
		t.Fatal(err)
	}
	issuerKey := (&certmagic.ACMEIssuer{CA: directory}).IssuerKey()
	key := "acme/" + certmagic.StorageKeys.Safe(issuerKey) + "/challenge_tokens/" + certmagic.StorageKeys.Safe(name) + ".json"
	if err := (&certmagic.FileStorage{Path: storage}).Store(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// oidACMEIdentifier is the extension of a tls-alpn-01 challenge's
// certificate (RFC 8737 section 3).
var oidACMEIdentifier = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 31}

func isChallengeCert(c *x509.Certificate) bool {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidACMEIdentifier) {
			return true
		}
	}
	return false
}

// TestACMEValidationHandshakeNeverReachesHTTP pins the tls-alpn-01 path
// on a listener that requires client certificates, whose validation
// handshake is not asked for one. A handshake offering ALPN "acme-tls/1"
// alone once got the site's certificate when it sent no server name
// (certmagic hands out its default then), and a handshake that
// negotiated "acme-tls/1" was then served as HTTP: anyone could open a
// tunnel without a client certificate. Now such a handshake gets a
// pending challenge's certificate or none, and its connection ends right
// after it.
func TestACMEValidationHandshakeNeverReachesHTTP(t *testing.T) {
	ports := newACMEPorts(t)
	p, table := startACMEEnv(t, ports, 0)
	files := newTLSFiles(t)
	caFile := files.dir + "/clients.pem"
	if err := os.WriteFile(caFile, files.ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer ask.Close()
	storage := t.TempDir()
	table += fmt.Sprintf("  domains = [\"mtls.acme.test\"]\n  storage = %q\n  on_demand = true\n  ask = %q\n", storage, ask.URL)
	e := newEnv(t, 1, acmeGatewayConfig(ports, table, fmt.Sprintf("  client_ca_file = %q\n", caFile)))
	waitUntilWithin(t, 30*time.Second, func() bool { return len(e.srv.acme.m.Certificates()) == 1 })
	addr := e.srv.TLSAddr().String()

	t.Run("no server name", func(t *testing.T) {
		c, err := dialValidation(addr, "")
		if err == nil {
			leaf := c.ConnectionState().PeerCertificates[0]
			c.Close()
			t.Fatalf("a validation handshake without a server name got %v (challenge certificate: %t), want the handshake refused", leaf.DNSNames, isChallengeCert(leaf))
		}
	})
	t.Run("no challenge pending", func(t *testing.T) {
		if c, err := dialValidation(addr, "mtls.acme.test"); err == nil {
			leaf := c.ConnectionState().PeerCertificates[0]
			c.Close()
			t.Fatalf("a validation handshake with no challenge pending got %v, want the handshake refused", leaf.DNSNames)
		}
	})
	t.Run("challenge pending", func(t *testing.T) {
		plantTLSALPNChallenge(t, storage, p.Directory, "mtls.acme.test")
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second,
			NetDialTLSContext: func(context.Context, string, string) (net.Conn, error) {
				c, err := dialValidation(addr, "mtls.acme.test")
				if err != nil {
					return nil, err
				}
				st := c.ConnectionState()
				if st.NegotiatedProtocol != "acme-tls/1" || !isChallengeCert(st.PeerCertificates[0]) {
					t.Errorf("validation handshake: ALPN %q, challenge certificate %t; want acme-tls/1 and the challenge's", st.NegotiatedProtocol, isChallengeCert(st.PeerCertificates[0]))
				}
				return c, nil
			}}
		ws, _, err := d.Dial("wss://"+addr+"/room/bypass", nil)
		if err == nil {
			partner := e.mustDial("/room/bypass")
			roomExchange(t, ws, partner, "no client certificate")
			ws.Close()
			partner.Close()
			t.Fatal("a WebSocket tunnel was opened over an acme-tls/1 handshake, without a client certificate, on a listener that requires one")
		}
		t.Logf("refused: %v", err)
	})
}

// TestACMENoServerNameGetsDefaultFile pins "the first file stays the
// default for a client sending no name" (docs/config.md) with ACME
// domains beside the files: such a client once got the first domain's
// ACME certificate.
func TestACMENoServerNameGetsDefaultFile(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, ports, 0)
	files := newTLSFiles(t)
	table += fmt.Sprintf("  domains = [\"nosni.acme.test\"]\n  storage = %q\n", t.TempDir())
	fileTable := fmt.Sprintf("  [[gateway.tls.certificates]]\n  cert_file = %q\n  key_file = %q\n", files.certs[2][0], files.certs[2][1])
	e := newEnv(t, 1, acmeGatewayConfig(ports, table, fileTable))
	addr := e.srv.TLSAddr().String()
	waitACMELeaf(t, addr, "nosni.acme.test")
	leaf, err := handshakeLeaf(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Equal(files.leafs[2].Cert) {
		t.Errorf("no server name: served %v (issuer %q), want the first file's certificate", leaf.DNSNames, leaf.Issuer.CommonName)
	}
}

// TestACMEValidationStrangersLogNoErrors pins the log of handshakes
// offering ALPN "acme-tls/1" alone for a domain with no challenge
// pending: certmagic wrote an ERROR line for each, so anyone could fill
// the log. Now each is a Debug line.
func TestACMEValidationStrangersLogNoErrors(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, ports, 0)
	table += fmt.Sprintf("  domains = [\"flood.acme.test\"]\n  storage = %q\n", t.TempDir())
	var buf testproc.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnvLog(t, 1, acmeGatewayConfig(ports, table, ""), log)
	addr := e.srv.TLSAddr().String()
	waitACMELeaf(t, addr, "flood.acme.test")
	before := len(buf.String())
	const n = 20
	for range n {
		if c, err := dialValidation(addr, "flood.acme.test"); err == nil {
			c.Close()
			t.Fatal("a validation handshake with no challenge pending succeeded")
		}
	}
	debug := 0
	for _, l := range strings.Split(buf.String()[before:], "\n") {
		if !strings.Contains(l, `"msg":"tls-alpn challenge"`) {
			continue
		}
		if !strings.Contains(l, `"level":"DEBUG"`) {
			t.Fatalf("a stranger's validation handshake logged above Debug: %s", l)
		}
		debug++
	}
	if debug != n {
		t.Errorf("%d Debug lines for %d stranger handshakes, want one each", debug, n)
	}
}
