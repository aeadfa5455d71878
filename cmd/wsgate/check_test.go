package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestCheckStartsPlugins runs `wsgate -check` on configs whose jwt plugin
// table is wrong and right. It pins a defect: -check only validated the
// file, so a plugin config with a key the plugin does not know (the
// shipped examples' secret_env) passed the check and failed the start.
func TestCheckStartsPlugins(t *testing.T) {
	// Race-enabled builds otherwise sleep a second at exit.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	t.Setenv("WSGATE_CHECK_SECRET", "s3cret")
	wsgate := testproc.Build(t, "./cmd/wsgate")
	jwt := testproc.Build(t, "./plugins/jwt")
	for _, tc := range []struct {
		name   string
		config string // the [plugins.config] table's body
		code   int
		want   string // in the output; FILE and BIN stand for the paths
	}{
		{"right key", `hs256_secret_env = "WSGATE_CHECK_SECRET"`, 0, "FILE: ok\n"},
		{"wrong key", `secret_env = "WSGATE_CHECK_SECRET"`, 1,
			`FILE:13: plugins[0].config: plugin "jwt" (BIN): configure: auth: invalid plugin config: ` +
				`unknown key "secret_env" (known: hs256_secret_env, rs256_public_key_file, issuer, audience, token_from, claims_to_headers)` + "\n"},
		{"unset secret", `hs256_secret_env = "WSGATE_CHECK_UNSET"`, 1,
			`FILE:13: plugins[0].config: plugin "jwt" (BIN): configure: auth: invalid plugin config: ` +
				`hs256_secret_env: environment variable WSGATE_CHECK_UNSET is empty or unset` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wsgate.toml")
			cfg := "[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n\n" +
				"[[routes]]\npool = \"relay\"\nauth = [\"jwt\"]\n\n" +
				"[[plugins]]\nname = \"jwt\"\npath = \"" + jwt + "\"\n  [plugins.config]\n  " + tc.config + "\n"
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			runCheck(t, wsgate, path, tc.code, strings.NewReplacer("FILE", path, "BIN", jwt).Replace(tc.want))
		})
	}
}

// runCheck runs `wsgate -check` (the binary wsgate) on the config at path
// and wants exit status code and want in its output.
func runCheck(t *testing.T, wsgate, path string, code int, want string) {
	t.Helper()
	p := testproc.Start(t, "wsgate-check", wsgate, "-check", "-config", path)
	got, err := p.Wait(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out := p.Output(); got != code || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output:\n%s\nwant exit %d and\n%s", got, out, code, want)
	}
}

// TestCheckLoadsTLSFiles runs `wsgate -check` on a config whose second
// certificate file is missing: the check fails as the start would, naming
// the file's line and key, rather than passing a config that cannot start.
func TestCheckLoadsTLSFiles(t *testing.T) {
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	wsgate := testproc.Build(t, "./cmd/wsgate")
	ca, err := testca.New("check CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("gw.test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := leaf.WriteFiles(dir, "gw")
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	for _, tc := range []struct {
		name, second string
		code         int
		want         string
	}{
		{"files there", certFile, 0, "FILE: ok\n"},
		{"file missing", missing, 1, "FILE:7: gateway.tls.certificates[1]: load " + missing + " and " + keyFile + ": open " + missing + ": no such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wsgate.toml")
			cfg := fmt.Sprintf("[gateway]\n  [gateway.tls]\n  listen = \"127.0.0.1:8443\"\n"+
				"  [[gateway.tls.certificates]]\n  cert_file = %q\n  key_file = %q\n"+
				"  [[gateway.tls.certificates]]\n  # the same name twice: the first wins\n"+
				"  cert_file = %q\n  key_file = %q\n\n"+
				"[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n\n[[routes]]\npool = \"relay\"\n",
				certFile, keyFile, tc.second, keyFile)
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			runCheck(t, wsgate, path, tc.code, strings.ReplaceAll(tc.want, "FILE", path))
		})
	}
}

// TestCheckACMEClosedPort pins `wsgate -check` on an ACME table whose
// directory nobody answers (a closed loopback port): it said ok, and the
// gateway then failed every order. It now exits 1 naming the file, the
// line and the key, and why.
func TestCheckACMEClosedPort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wsgate.toml")
	cfg := fmt.Sprintf("[gateway.tls]\nlisten = \"127.0.0.1:0\"\n  [gateway.tls.acme]\n  directory = \"https://%s/dir\"\n  domains = [\"a.example.test\"]\n  storage = \"acme\"\n\n"+
		"[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = \"127.0.0.1:7001\"\n[[routes]]\npool = \"relay\"\n", testproc.FreeAddr(t))
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-check", "-config", path}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1 (stdout %q)", code, out.String())
	}
	for _, want := range []string{path + ":4: gateway.tls.acme.directory:", "cannot be reached", "connection refused"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("message %q lacks %q", errb.String(), want)
		}
	}
}
