package gateway

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/pebbletest"
	"github.com/wsgate/wsgate/internal/testca"
)

// acmeCheckConfig is a config whose [gateway.tls.acme] fetches directory,
// trusting caFile ("" = the system's roots).
func acmeCheckConfig(t *testing.T, directory, caFile string) *conf.Config {
	t.Helper()
	ca := ""
	if caFile != "" {
		ca = fmt.Sprintf("  ca_file = %q\n", caFile)
	}
	cfg, err := conf.Parse(filepath.Join(t.TempDir(), "check.toml"), []byte(fmt.Sprintf(`
[gateway.tls]
listen = "127.0.0.1:0"
  [gateway.tls.acme]
  directory = %q
  domains = ["check.acme.test"]
  storage = "acme"
%s[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"
[[routes]]
pool = "relay"
`, directory, ca)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCheckACMEReachesTheDirectory pins an early warning that was
// missing: `wsgate -check` said ok to an ACME table whose directory the
// gateway could never use, and the gateway then failed every order. Now
// the check fetches the directory as a start would, and says why it
// could not: the CA file left out (Debian's pebble, a private CA), a CA
// file of another CA, a closed port, an answer that is no directory.
func TestCheckACMEReachesTheDirectory(t *testing.T) {
	ports := newACMEPorts(t)
	p := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports.plain, TLSPort: ports.tls})
	other, err := testca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherFile, other.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "<html>welcome</html>")
	}))
	t.Cleanup(notDir.Close)
	notDirCA := filepath.Join(t.TempDir(), "httptest.pem")
	if err := os.WriteFile(notDirCA, certPEM(notDir.Certificate().Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("https://127.0.0.1:%d/dir", pebbletest.FreePort(t))
	for _, tc := range []struct {
		name, directory, caFile string
		key                     string // "" = no error
		want                    []string
	}{
		{"pebble with its CA", p.Directory, p.CAFile, "", nil},
		{"CA file left out", p.Directory, "", "gateway.tls.acme.ca_file", []string{"ca_file is not set", "certificate signed by unknown authority"}},
		{"another CA's file", p.Directory, otherFile, "gateway.tls.acme.ca_file", []string{"ca_file " + otherFile}},
		{"closed port", closed, p.CAFile, "gateway.tls.acme.directory", []string{"cannot be reached", "connection refused"}},
		{"not a directory", notDir.URL + "/dir", notDirCA, "gateway.tls.acme.directory", []string{"something else than a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := acmeCheckConfig(t, tc.directory, tc.caFile)
			err := CheckACME(context.Background(), cfg)
			if tc.key == "" {
				if err != nil {
					t.Fatalf("CheckACME = %v, want nil", err)
				}
				return
			}
			var ce *conf.Error
			if !errors.As(err, &ce) || ce.Key != tc.key || ce.Line == 0 {
				t.Fatalf("CheckACME = %v, want an error at %s with its line", err, tc.key)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckACME = %v, want it to say %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(cfg.File), "acme")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the check touched the storage: %v", err)
			}
		})
	}
}

// TestReadyzWaitsForACMECertificate pins /readyz of a gateway whose TLS
// listener has no certificate to serve: with pebble's CA file left out,
// every order fails and no handshake can succeed, yet /readyz said
// "ready". It now answers 503 with the reason (the listener, the names,
// when the last order failed; not its error, which the log has: /readyz
// answers anyone) until a certificate is obtained, and 200 once one is.
func TestReadyzWaitsForACMECertificate(t *testing.T) {
	ports := newACMEPorts(t)
	p, table := startACMEEnv(t, ports, 0)
	readyz := func(e *env) (int, string) {
		resp, err := http.Get("http://" + e.srv.AdminAddr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitReadyz := func(e *env, code int, want ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, body := readyz(e)
			ok := got == code
			for _, w := range want {
				ok = ok && strings.Contains(body, w)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz answered %d %q within 30s, want %d with %q", got, body, code, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	withAdmin := func(cfg string) string {
		return strings.Replace(cfg, "[admin]\nlisten = \"\"", "[admin]\nlisten = \"127.0.0.1:0\"", 1)
	}

	noCA := strings.Replace(table, fmt.Sprintf("  ca_file = %q\n", p.CAFile), "", 1)
	noCA += fmt.Sprintf("  domains = [\"one.acme.test\"]\n  storage = %q\n", t.TempDir())
	bad := newEnv(t, 1, withAdmin(acmeGatewayConfig(ports, noCA, "")))
	waitReadyz(bad, http.StatusServiceUnavailable, "not ready: the TLS listener "+bad.srv.TLSAddr().String()+" has no certificate to serve",
		"one.acme.test", "the last order (one.acme.test) failed at ", "the log's \"ACME order failed\" line says why")
	if _, body := readyz(bad); strings.Contains(body, "unknown authority") || strings.Contains(body, p.Directory) {
		t.Errorf("/readyz, which answers anyone, shows the order's error: %q", body)
	}
	_ = bad.srv.Shutdown(context.Background())

	good := newEnv(t, 1, withAdmin(acmeGatewayConfig(ports, table+fmt.Sprintf("  domains = [\"one.acme.test\"]\n  storage = %q\n", t.TempDir()), "")))
	waitReadyz(good, http.StatusOK, "ready")
	waitACMELeaf(t, good.srv.TLSAddr().String(), "one.acme.test")
}

// certPEM is a DER certificate as PEM.
func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
