package conf

import (
	"os"
	"path/filepath"
	"testing"
)

// TestACMEPathsFromConfigDir checks that a relative ACME storage
// directory and ca_file are taken from the config file's directory, and
// that a redis:// storage is left as written.
func TestACMEPathsFromConfigDir(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ storage, want string }{
		{"acme", filepath.Join(dir, "acme")},
		{"/var/lib/wsgate/acme", "/var/lib/wsgate/acme"},
		{"redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2"},
	} {
		path := filepath.Join(dir, "wsgate.toml")
		cfg := `
[gateway.tls]
listen = "127.0.0.1:8443"
  [gateway.tls.acme]
  directory = "https://acme.example/dir"
  domains = ["ws.example.com"]
  storage = "` + tc.storage + `"
  ca_file = "tls/acme-ca.pem"
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"
[[routes]]
pool = "relay"
`
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Chdir(t.TempDir())
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		a := c.Gateway.TLS.ACME
		if a.Storage != tc.want || a.CAFile != filepath.Join(dir, "tls/acme-ca.pem") {
			t.Errorf("storage %q: got storage %q, ca_file %q", tc.storage, a.Storage, a.CAFile)
		}
		if a.AskTimeout.Duration <= 0 || a.OnDemandRate != 1 || a.OnDemandBurst != 10 {
			t.Errorf("defaults not applied: %+v", a)
		}
	}
}
