package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestShippedExamplesConfigure feeds the jwt [plugins.config] of every
// example the project ships (the reference config, the docs, the README,
// the test data) to the plugin's Configure. It pins a defect: the examples
// used secret_env, a key the plugin does not know, so a newcomer's first
// config passed -check and then failed to start.
func TestShippedExamplesConfigure(t *testing.T) {
	t.Setenv("JWT_SECRET", "example-secret")
	sources := []string{
		"../../conf/wsgate.toml",
		"../../testdata/conf/valid/full.toml",
		"../../docs/config.md",
		"../../docs/plugins.md",
		"../../README.md",
	}
	found := 0
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		texts := []string{string(b)}
		if strings.HasSuffix(src, ".md") {
			texts = tomlBlocks(string(b))
		}
		for i, text := range texts {
			var tree struct {
				Plugins []struct {
					Name   string         `toml:"name"`
					Config map[string]any `toml:"config"`
				} `toml:"plugins"`
			}
			if _, err := toml.Decode(uncommentPlugins(text), &tree); err != nil {
				t.Fatalf("%s, TOML example %d: %v", src, i, err)
			}
			for _, p := range tree.Plugins {
				if p.Name != "jwt" {
					continue
				}
				found++
				if err := (&jwtAuth{}).Configure(context.Background(), p.Config); err != nil {
					t.Errorf("%s, TOML example %d: the jwt plugin rejects its config: %v", src, i, err)
				}
			}
		}
	}
	if found < len(sources) {
		t.Fatalf("found %d jwt examples in %d files; want one at least in each", found, len(sources))
	}
}

// tomlBlocks returns the contents of the ```toml blocks of a Markdown text.
func tomlBlocks(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// uncommentPlugins turns a commented-out [[plugins]] example ("# [[plugins]]"
// and the "#" lines after it) into live TOML, as a reader would.
func uncommentPlugins(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "# [[plugins]]") {
			in = true
		}
		if !strings.HasPrefix(l, "#") {
			in = false
		}
		if in {
			lines[i] = strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ")
		}
	}
	return strings.Join(lines, "\n")
}
