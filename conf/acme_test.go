package conf

import (
	"os"
	"path/filepath"
	"strings"
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

// TestACMEURLErrorsHideCredentials pins what an invalid directory or ask
// URL's error quotes: it is shown by -check, in the log of a refused
// reload and in /api/reload's answer, and once quoted the URL whole,
// password and query included. Now its userinfo, query and fragment are
// shown as "...", and a URL that does not parse is not quoted.
func TestACMEURLErrorsHideCredentials(t *testing.T) {
	for _, tc := range []struct{ name, directory, ask, want string }{
		{"ask with a password and a query", "https://acme.example/dir", "https://u:hunter2@ask.internal/ask?k=hunter2#hunter2",
			`gateway.tls.acme.ask: must be an http:// or https:// URL without a query ("?domain=NAME" is added), got "https://...@ask.internal/ask?...#..."`},
		{"ask with a token as user", "https://acme.example/dir", "ftp://hunter2@ask.internal/ask",
			`got "ftp://...@ask.internal/ask"`},
		{"ask that does not parse", "https://acme.example/dir", "https://u:hunter2@ask.internal:port/ask",
			`gateway.tls.acme.ask: must be an http:// or https:// URL: invalid port`},
		{"directory with a password", "http://acme:hunter2@acme.example/dir?x", "https://ask.internal/ask",
			`got "http://...@acme.example/dir?..."`},
		{"directory that does not parse", "https://acme:hunter2@acme.example:port/dir", "https://ask.internal/ask",
			`gateway.tls.acme.directory: must be an https:// URL: invalid port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.toml", []byte(`
[gateway.tls]
listen = "127.0.0.1:8443"
  [gateway.tls.acme]
  directory = "`+tc.directory+`"
  storage = "/tmp/acme"
  on_demand = true
  ask = "`+tc.ask+`"
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"
[[routes]]
pool = "relay"
`))
			if err == nil {
				t.Fatal("want an error")
			}
			s := err.Error()
			if strings.Contains(s, "hunter2") {
				t.Errorf("the error shows a credential:\n%s", s)
			}
			if !strings.Contains(s, tc.want) {
				t.Errorf("error:\n%s\nwant it to say %s", s, tc.want)
			}
		})
	}
}
