package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/pebbletest"
)

// BenchmarkTLSHandshakeSource measures a full TLS handshake with the
// gateway (TLS 1.3, ECDSA P-256 either way), the certificate served from
// a file or from ACME (a name no file covers, looked up in certmagic's
// cache): what the ACME path adds to a handshake.
func BenchmarkTLSHandshakeSource(b *testing.B) {
	ports := acmePorts{pebbletest.FreePort(b), pebbletest.FreePort(b)}
	p := pebbletest.Start(b, pebbletest.Options{HTTPPort: ports.plain, TLSPort: ports.tls})
	files := newTLSFiles(b)
	table := fmt.Sprintf("  directory = %q\n  ca_file = %q\n  domains = [\"bench.acme.test\"]\n  storage = %q\n", p.Directory, p.CAFile, b.TempDir())
	fileTable := fmt.Sprintf("  [[gateway.tls.certificates]]\n  cert_file = %q\n  key_file = %q\n", files.certs[2][0], files.certs[2][1])
	cfg, err := conf.Parse("bench.toml", []byte(fmt.Sprintf(acmeGatewayConfig(ports, table, fileTable), "", "127.0.0.1:1")))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	addr := srv.TLSAddr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaf, err := handshakeLeaf(addr, "bench.acme.test")
		if err == nil && strings.Contains(leaf.Issuer.CommonName, "Pebble") {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no ACME certificate within 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range []string{"a.example.test", "bench.acme.test"} {
		source := map[bool]string{true: "file", false: "acme"}[name == "a.example.test"]
		b.Run(source, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
					&tls.Config{ServerName: name, InsecureSkipVerify: true, ClientSessionCache: nil})
				if err != nil {
					b.Fatal(err)
				}
				_ = c.Close()
			}
		})
	}
}
