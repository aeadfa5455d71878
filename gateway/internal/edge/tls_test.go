package edge

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/conf"
)

// TestTLSMissingRelativeFileSaysWhere: relative certificate paths are
// taken from the config file's directory (issue 19 item 15), where they
// were once taken from the working directory; a deployment that still
// relies on the old reading gets an error that says so, not only the
// absolute path that was not found.
func TestTLSMissingRelativeFileSaysWhere(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "wsgate.toml")
	cfg, err := conf.Parse(file, []byte(`
[gateway]
listen = "127.0.0.1:0"
  [gateway.tls]
  listen = "127.0.0.1:1"
  [[gateway.tls.certificates]]
  cert_file = "certs/server.crt"
  key_file = "certs/server.key"

[[pools]]
name = "p"
  [[pools.nodes]]
  addr = "127.0.0.1:1"

[[routes]]
pool = "p"
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadTLS(cfg)
	want := filepath.Join(dir, "certs", "server.crt")
	if err == nil || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "a relative path is taken from the config file's directory") {
		t.Fatalf("LoadTLS: %v, want an error naming %s and how relative paths are read", err, want)
	}
}
