package gateway

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestPluginFilesRelativeToConfig pins a path that meant something else
// than every other: the apikey plugin's `file` (and the jwt plugin's
// rs256_public_key_file) was taken from the gateway's working directory,
// where every path of the gateway's own is taken from the config file's.
// With the config, its keys file and its RS256 key in a directory of
// their own, named relatively, and the test's working directory elsewhere
// (the package's), `-check` passes and the gateway admits the file's key.
func TestPluginFilesRelativeToConfig(t *testing.T) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	keyBin := testproc.Build(t, "./plugins/apikey")
	jwtBin := testproc.Build(t, "./plugins/jwt")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "auth"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth", "keys.txt"), []byte("k1 alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth", "rs256.pem"), rs256PublicPEM(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if wd, _ := os.Getwd(); wd == dir {
		t.Fatal("the working directory is the config's: the test would prove nothing")
	}
	back := newRecorder(t)
	file := filepath.Join(dir, "wsgate.toml")
	cfgText := fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "100ms"
drain_timeout = "5s"
[admin]
listen = ""
[[pools]]
name = "back"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/key/"
pool = "back"
auth = ["apikey"]
[[routes]]
path_prefix = "/jwt/"
pool = "back"
auth = ["jwt"]
[[plugins]]
name = "apikey"
path = %q
  [plugins.config]
  file = "auth/keys.txt"
[[plugins]]
name = "jwt"
path = %q
  [plugins.config]
  rs256_public_key_file = "auth/rs256.pem"
`, back.addr(), keyBin, jwtBin)
	if err := os.WriteFile(file, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlugins(cfg, quietLog()); err != nil {
		t.Fatalf("-check: %v", err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	e := &authEnv{srv: srv, gw: srv.Addr().String(), back: back}
	for k, want := range map[string]int{"k1": 101, "k2": 403} {
		c, status, err := e.dial("/key/r", http.Header{"X-Api-Key": {k}})
		if err == nil {
			c.Close()
			status = 101
		}
		if status != want {
			t.Errorf("key %s: %d, want %d", k, status, want)
		}
	}
}

// rs256PublicPEM is the PEM of a new RSA public key.
func rs256PublicPEM(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}
