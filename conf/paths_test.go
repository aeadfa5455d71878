package conf

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRelativePathsFromConfigDir pins issue 19 item 15: a relative
// plugins.path was taken from the working directory (under the shipped
// systemd unit, "/"), not from the config file's directory. Plugin and
// TLS paths (the listener's and [pools.tls]'s) are now taken from the
// file's directory; absolute ones stay.
func TestRelativePathsFromConfigDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "wsgate.toml")
	const cfg = `
[gateway.tls]
listen = "127.0.0.1:8443"
client_ca_file = "tls/ca.pem"
  [[gateway.tls.certificates]]
  cert_file = "tls/gw.crt"
  key_file = "/abs/gw.key"

[[pools]]
name = "relay"
  [pools.tls]
  ca_file = "tls/nodes-ca.pem"
  cert_file = "tls/client.crt"
  key_file = "/abs/client.key"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"

[[routes]]
pool = "relay"
auth = ["jwt", "apikey"]

[[plugins]]
name = "jwt"
path = "plugins/jwt"

[[plugins]]
name = "apikey"
path = "/usr/libexec/wsgate/apikey"
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Load from elsewhere: the working directory must not matter.
	t.Chdir(t.TempDir())
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, got, want string }{
		{"plugins[0].path", c.Plugins[0].Path, filepath.Join(dir, "plugins/jwt")},
		{"plugins[1].path", c.Plugins[1].Path, "/usr/libexec/wsgate/apikey"},
		{"gateway.tls.client_ca_file", c.Gateway.TLS.ClientCAFile, filepath.Join(dir, "tls/ca.pem")},
		{"gateway.tls.certificates[0].cert_file", c.Gateway.TLS.Certificates[0].CertFile, filepath.Join(dir, "tls/gw.crt")},
		{"gateway.tls.certificates[0].key_file", c.Gateway.TLS.Certificates[0].KeyFile, "/abs/gw.key"},
		{"pools[0].tls.ca_file", c.Pools[0].TLS.CAFile, filepath.Join(dir, "tls/nodes-ca.pem")},
		{"pools[0].tls.cert_file", c.Pools[0].TLS.CertFile, filepath.Join(dir, "tls/client.crt")},
		{"pools[0].tls.key_file", c.Pools[0].TLS.KeyFile, "/abs/client.key"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.key, tc.got, tc.want)
		}
	}
}
