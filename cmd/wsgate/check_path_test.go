package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestCheckPluginPathFromConfigDir pins issue 19 item 15: `wsgate -check`
// on a config naming its plugin by a path relative to the config file
// passes from any working directory, and when the plugin is not there it
// says the path it looked at.
func TestCheckPluginPathFromConfigDir(t *testing.T) {
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	t.Setenv("WSGATE_CHECK_SECRET", "s3cret")
	wsgate := testproc.Build(t, "./cmd/wsgate")
	jwt := testproc.Build(t, "./plugins/jwt")
	dir := t.TempDir()
	path := filepath.Join(dir, "wsgate.toml")
	cfg := "[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n\n" +
		"[[routes]]\npool = \"relay\"\nauth = [\"jwt\"]\n\n" +
		"[[plugins]]\nname = \"jwt\"\npath = \"plugins/jwt\"\n  [plugins.config]\n  hs256_secret_env = \"WSGATE_CHECK_SECRET\"\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "plugins", "jwt")
	runCheck(t, wsgate, path, 1, path+`:12: plugins[0].path: plugin "jwt": no executable at `+want+
		" (a relative path is taken from the config file's directory)\n")

	b, err := os.ReadFile(jwt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, b, 0o755); err != nil {
		t.Fatal(err)
	}
	runCheck(t, wsgate, path, 0, path+": ok\n")
}
