package conf

import (
	"bytes"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

const linesDoc = `# comment [not] = a table
[gateway]
listen = ":8080" # trailing [comment]
listeners = [
  ":1",   # one
  ":2",
]

[[pools]]
name = "a"
  [pools.health]
  path = "/h"
  [[pools.nodes]]
  addr = "x:1"
  [[pools.nodes]]
  addr = "x:2"
  max_conns = -5

[[pools]]
name = "b"
health.interval = "1s"
nodes = [
  { addr = "y:1" },
  { addr = "y:2",
    weight = 3 },
]
note = """
[not.a.header]
x = 1
"""
'lit.key' = 'v'
"quoted key" = 1

[[routes]]
pool = "a"
`

func TestLineIndex(t *testing.T) {
	x := indexLines([]byte(linesDoc))
	tests := []struct {
		path string
		want int
	}{
		{"gateway", 2},
		{"gateway.listen", 3},
		{"gateway.listeners", 4},
		{"gateway.listeners[0]", 5},
		{"gateway.listeners[1]", 6},
		{"pools", 9},
		{"pools[0]", 9},
		{"pools[0].name", 10},
		{"pools[0].health", 11},
		{"pools[0].health.path", 12},
		{"pools[0].nodes[0]", 13},
		{"pools[0].nodes[0].addr", 14},
		{"pools[0].nodes[1].addr", 16},
		{"pools[0].nodes[1].max_conns", 17},
		{"pools[1]", 19},
		{"pools[1].health.interval", 21},
		{"pools[1].nodes", 22},
		{"pools[1].nodes[0].addr", 23},
		{"pools[1].nodes[1]", 24},
		{"pools[1].nodes[1].weight", 25},
		{"pools[1].note", 27},
		{`pools[1]."lit.key"`, 31},
		{`pools[1]."quoted key"`, 32},
		{"routes[0].pool", 35},
		// Not recorded: the longest recorded prefix answers.
		{"pools[0].nodes[1].bogus", 15},
		{"pools[1].nodes[0].weight", 23},
		{"pools[7].name", 9},
		{"not", 0},
		{"", 0},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := x.Line(tt.path); got != tt.want {
				t.Fatalf("Line(%q) = %d, want %d", tt.path, got, tt.want)
			}
		})
	}
}

func TestParentPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a", ""},
		{"a.b", "a"},
		{"a[3]", "a"},
		{"a[3].b", "a[3]"},
		{`a."b.c"`, "a"},
		{`a."b[1]"`, "a"},
		{`a."b\".c"`, "a"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := parentPath(tt.in); got != tt.want {
				t.Fatalf("parentPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzLineIndex checks that the line scanner never panics or hangs, that
// every line it reports lies within the input, and that on input the TOML
// library accepts every key the library sees can be given a line.
func FuzzLineIndex(f *testing.F) {
	f.Add([]byte(linesDoc))
	f.Add([]byte("a = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n"))
	f.Add([]byte("a = \"\"\"x\"\"\"\"\"\nb = '''\n'''\n"))
	f.Add([]byte("[a]\n\"x\\\"y\" = {b = [1, {c = 2}], d.e = 3}\n"))
	f.Add([]byte("[[a]]\n[[a.b]]\n[a.b.c]\nx=1\n[[a]]\n[[a.b]]\n"))
	f.Add([]byte("\"unterminated\n= [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := indexLines(data)
		max := bytes.Count(data, []byte("\n")) + 1
		for p, n := range x.lines {
			if n < 1 || n > max {
				t.Fatalf("path %q at line %d, input has %d lines", p, n, max)
			}
		}
		var tree map[string]any
		if _, err := toml.Decode(string(data), &tree); err != nil {
			return
		}
		for _, p := range leafPaths("", tree) {
			if x.Line(p) == 0 {
				t.Fatalf("no line for key %q", p)
			}
		}
	})
}

// leafPaths lists the key paths of a parsed TOML tree, as conf prints them.
func leafPaths(prefix string, v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = append(out, leafPaths(joinKey(prefix, k), e)...)
		}
	case []map[string]any:
		for i, e := range v {
			out = append(out, leafPaths(indexKey(prefix, i), e)...)
		}
	case []any:
		for i, e := range v {
			out = append(out, leafPaths(indexKey(prefix, i), e)...)
		}
	}
	if prefix != "" && !strings.HasSuffix(prefix, "]") {
		out = append(out, prefix)
	}
	return out
}
