package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/pebbletest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestOperationsPebble runs the "Trying it with Pebble" steps of
// docs/operations.md as written, on free loopback ports instead of the
// doc's (14000, 15000, 8053, 8055, 8080, 8443, 9090): the openssl line,
// pebble-config.json, pebble-challtestsrv and pebble with their command
// lines, wsgate.toml, `wsgate -check`, wsgate itself, /readyz until
// ready, Pebble's root, and openssl's verification of the certificate
// the gateway obtained. It pins a gap: Debian's pebble ships no config
// (its default path does not exist), and nothing in the docs said how to
// run one, so ACME could not be tried from the docs alone.
func TestOperationsPebble(t *testing.T) {
	pebbletest.Require(t, "pebble", "pebble-challtestsrv", "openssl", "curl")
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "**Trying it with Pebble.**")
	if !ok {
		t.Fatal("docs/operations.md has no \"Trying it with Pebble\" paragraph")
	}
	section, _, _ = strings.Cut(section, "\n**Not done:**")
	blocks := map[string][]string{}
	for _, m := range regexp.MustCompile("(?s)```(sh|json|toml)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks[m[1]] = append(blocks[m[1]], m[2])
	}
	if len(blocks["sh"]) != 3 || len(blocks["json"]) != 1 || len(blocks["toml"]) != 1 {
		t.Fatalf("want 3 sh blocks (the certificate, the servers, the checks), pebble's JSON and wsgate's TOML; found %d, %d, %d",
			len(blocks["sh"]), len(blocks["json"]), len(blocks["toml"]))
	}
	var pairs []string
	for _, port := range []string{"14000", "15000", "8055", "8080", "8443", "9090"} {
		pairs = append(pairs, port, strconv.Itoa(pebbletest.FreePort(t)))
	}
	pairs = append(pairs, "8053", strconv.Itoa(pebbletest.FreeUDPPort(t)))
	ports := strings.NewReplacer(pairs...)
	for k, bs := range blocks {
		for i := range bs {
			bs[i] = ports.Replace(bs[i])
		}
		blocks[k] = bs
	}
	dir := t.TempDir()
	bin := filepath.Dir(testproc.Build(t, "./cmd/wsgate"))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, f := range []struct{ name, text string }{{"pebble-config.json", blocks["json"][0]}, {"wsgate.toml", blocks["toml"][0]}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range shellLines(blocks["sh"][0]) {
		runLine(t, dir, line)
	}
	for _, line := range shellLines(blocks["sh"][1]) {
		startLine(t, dir, line)
	}
	// Pebble answers its directory within a second or so.
	waitOutput(t, dir, "curl -sk https://127.0.0.1:"+ports.Replace("14000")+"/dir", `"newOrder"`)
	checks := shellLines(blocks["sh"][2])
	want := []string{"wsgate.toml: ok", "", "ready", "", "Verify return code: 0 (ok)"}
	if len(checks) != len(want) {
		t.Fatalf("%d check lines, want %d: %q", len(checks), len(want), checks)
	}
	for i, line := range checks {
		switch {
		case strings.Contains(line, " &"):
			startLine(t, dir, line)
		case strings.Contains(line, "/readyz"):
			waitOutput(t, dir, line, "ready\n") // "not ready: ..." until the certificate is obtained
		case want[i] == "":
			runLine(t, dir, line)
		default:
			if out := runLine(t, dir, line); !strings.Contains(out, want[i]) {
				t.Errorf("%s\nprinted %q, want %q", line, out, want[i])
			}
		}
	}
}

// shellLines are the commands of a sh block: continuation lines joined,
// blank lines dropped.
func shellLines(block string) []string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// runLine runs a foreground command line in dir with sh, within a minute,
// and returns what it printed; it fails the test if it fails.
func runLine(t *testing.T, dir, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%v:\n%s", line, err, out)
	}
	return string(out)
}

// waitOutput runs line until what it prints contains want (is want, for
// a want ending in a newline), for up to 30s.
func waitOutput(t *testing.T, dir, line, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput()
		if strings.HasSuffix(want, "\n") && string(out) == want || !strings.HasSuffix(want, "\n") && strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s\nprinted %q within 30s, want %q", line, out, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startLine starts a background command line ("VAR=v prog args... &",
// a comment allowed after it) as its own process, so the test ends it by
// its PID: sh execs the program.
func startLine(t *testing.T, dir, line string) {
	t.Helper()
	line, _, _ = strings.Cut(line, " #")
	line = strings.TrimSuffix(strings.TrimSpace(line), "&")
	var env []string
	fields := strings.Fields(line)
	for len(fields) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(fields[0]) {
		env = append(env, fields[0])
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), fields[0]))
		fields = fields[1:]
	}
	if len(fields) == 0 {
		t.Fatalf("background line %q runs nothing", line)
	}
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	testproc.StartCmd(t, fmt.Sprintf("%s-%d", filepath.Base(fields[0]), len(env)), cmd)
}
