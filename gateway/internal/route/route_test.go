package route

import (
	"strings"
	"testing"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

func FuzzRouteMatch(f *testing.F) {
	cfg, err := conf.Parse("fuzz.toml", []byte(`
[[pools]]
name = "p"
  [[pools.nodes]]
  addr = "127.0.0.1:1"
[[routes]]
host = "*.example.com"
path_prefix = "/a/"
pool = "p"
[[routes]]
host = "Example.org"
pool = "p"
`))
	if err != nil {
		f.Fatal(err)
	}
	p := &upstream.Pool{Name: "p"}
	rt := Compile(cfg, map[string]*upstream.Pool{"p": p})
	for _, s := range []string{"x.example.com:80", "[::1]:8080", "::1", "EXAMPLE.ORG", "example.com", "", "example.org.:443", "x.example.com."} {
		f.Add(s, "/a/b")
	}
	f.Fuzz(func(t *testing.T, host, path string) {
		r := rt.Match([]byte(host), []byte(path))
		h := strings.TrimRight(strings.ToLower(string(stripPort([]byte(host)))), ".")
		switch {
		case r == rt[0] && !strings.HasSuffix(h, ".example.com"):
			t.Fatalf("host %q matched *.example.com", host)
		case r == rt[1] && h != "example.org":
			t.Fatalf("host %q matched example.org", host)
		}
	})
}
