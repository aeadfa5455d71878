package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/conf"
)

// TestConfigChanges pins what a reload's log line says changed, by key
// path: the line used to say only "config reloaded" and the generation,
// whatever had changed, nothing included.
func TestConfigChanges(t *testing.T) {
	const base = `
[gateway]
listen = "127.0.0.1:8080"
max_conns = 1000
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"
  [[pools.nodes]]
  addr = "127.0.0.1:7002"
[[routes]]
path_prefix = "/room/"
pool = "relay"
[[plugins]]
name = "apikey"
path = "/bin/true"
  [plugins.config]
  file = "keys.txt"
  secret = "hunter2"
`
	parse := func(text string) *conf.Config {
		t.Helper()
		cfg, err := conf.Parse("t.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old := parse(base)
	for _, tc := range []struct {
		name string
		edit func(string) string
		want []string
	}{
		{"nothing", func(s string) string { return s }, nil},
		{"comment only", func(s string) string { return "# edited\n" + s }, nil},
		{"node added", func(s string) string {
			return strings.Replace(s, "[[routes]]", "  [[pools.nodes]]\n  addr = \"127.0.0.1:7003\"\n[[routes]]", 1)
		}, []string{"added pools[relay].nodes[127.0.0.1:7003]"}},
		{"node removed, weight changed", func(s string) string {
			return strings.Replace(strings.Replace(s, "  [[pools.nodes]]\n  addr = \"127.0.0.1:7002\"\n", "", 1),
				"addr = \"127.0.0.1:7001\"", "addr = \"127.0.0.1:7001\"\n  weight = 3", 1)
		}, []string{"changed pools[relay].nodes[127.0.0.1:7001].weight", "removed pools[relay].nodes[127.0.0.1:7002]"}},
		{"pool and route added", func(s string) string {
			return s + "[[pools]]\nname = \"chat\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7101\"\n[[routes]]\nhost = \"chat.example.com\"\npool = \"chat\"\n"
		}, []string{"added pools[chat]", "added routes[chat.example.com/ -> chat]"}},
		{"setting and restart", func(s string) string {
			return strings.Replace(strings.Replace(s, "max_conns = 1000", "max_conns = 2000", 1), "127.0.0.1:8080", "127.0.0.1:8081", 1)
		}, []string{"changed gateway.listen", "changed gateway.max_conns"}},
		{"plugin secret", func(s string) string { return strings.Replace(s, "hunter2", "hunter3", 1) },
			[]string{"changed plugins[apikey].config.secret"}},
	} {
		got := configChanges(old, parse(tc.edit(base)))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: changes %q, want %q", tc.name, got, tc.want)
		}
		for _, c := range got {
			if strings.Contains(c, "hunter") {
				t.Errorf("%s: a change shows a value: %q", tc.name, c)
			}
		}
	}
	var many strings.Builder
	many.WriteString(base)
	for i := range 30 {
		many.WriteString("[[pools]]\nname = \"p" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n")
	}
	if got := configChanges(old, parse(many.String())); len(got) != maxChanges+1 || got[maxChanges] != "and 10 more" {
		t.Errorf("30 pools added: %d changes, last %q; want %d and \"and 10 more\"", len(got), got[len(got)-1], maxChanges+1)
	}
}
