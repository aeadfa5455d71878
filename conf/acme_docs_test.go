package conf

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestOperationsACMEExamplesValidate runs every TOML example of the ACME
// section of docs/operations.md through Parse as written: an example
// that shows [gateway.tls.acme] alone gets the [gateway.tls] listener it
// sits in, and one without pools a pool and a route, nothing else. A
// reader copies these; one that did not validate would fail at their
// -check.
func TestOperationsACMEExamplesValidate(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## ACME\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## ACME section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 2 {
		t.Fatalf("found %d TOML examples in the ACME section, want the domains one and the on-demand one at least", len(blocks))
	}
	for i, b := range blocks {
		text := b[1]
		if !strings.Contains(text, "[gateway.tls.acme]") {
			t.Errorf("example %d has no [gateway.tls.acme] table:\n%s", i, text)
			continue
		}
		if !strings.Contains(text, "[gateway.tls]") {
			text = "[gateway.tls]\nlisten = \":443\"\n" + text
		}
		if !strings.Contains(text, "[[pools]]") {
			text += "\n[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n[[routes]]\npool = \"relay\"\n"
		}
		cfg, err := Parse("operations.md", []byte(text))
		if err != nil {
			t.Errorf("example %d does not validate: %v\n%s", i, err, b[1])
			continue
		}
		if cfg.Gateway.TLS.ACME == nil {
			t.Errorf("example %d: no ACME table after Parse", i)
		}
	}
}

// TestACMEFixtureDirectoryOnDemand pins what testdata/conf/valid's
// directory-storage fixture decodes to: a directory storage taken from
// the config file's directory, on demand with its rate and burst.
func TestACMEFixtureDirectoryOnDemand(t *testing.T) {
	cfg, err := Load("../testdata/conf/valid/acme_directory.toml")
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Gateway.TLS.ACME
	if a == nil {
		t.Fatal("no [gateway.tls.acme]")
	}
	if IsRedisStorage(a.Storage) || !strings.HasSuffix(a.Storage, "/testdata/conf/valid/acme-state") {
		t.Errorf("storage = %q, want the directory acme-state beside the file", a.Storage)
	}
	if !a.OnDemand || a.OnDemandRate != 5 || a.OnDemandBurst != 20 || a.AskTimeout.String() != "2s" {
		t.Errorf("on_demand %v, rate %d, burst %d, ask_timeout %s; want true, 5, 20, 2s", a.OnDemand, a.OnDemandRate, a.OnDemandBurst, a.AskTimeout)
	}
}
