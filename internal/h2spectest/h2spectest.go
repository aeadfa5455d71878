// Package h2spectest runs h2spec, the HTTP/2 conformance suite
// (github.com/summerwind/h2spec), against a listener a test started, and
// fails the test on any case that does not pass, naming each. The binary
// is not a dependency of the module: `make deps` installs it at Version
// into bin/ (go install), where Binary finds it.
package h2spectest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Version is the h2spec release the listeners are held to; Cases is the
// number of its cases (strict ones excluded) that must all pass.
const (
	Version = "v2.2.1+incompatible"
	Cases   = 145
)

// Package is what `go install` installs at Version.
const Package = "github.com/summerwind/h2spec/cmd/h2spec"

// Binary returns the h2spec executable: $WSGATE_H2SPEC, else the module's
// bin/h2spec (make deps), else h2spec on PATH or in $GOPATH/bin. When
// there is none it skips the test, unless WSGATE_REQUIRE_H2SPEC is set
// (CI sets it), where a skip would hide a missing install.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("WSGATE_H2SPEC"); p != "" {
		return p
	}
	var candidates []string
	if root, err := moduleRoot(); err == nil {
		candidates = append(candidates, filepath.Join(root, "bin", "h2spec"))
	}
	if p, err := exec.LookPath("h2spec"); err == nil {
		candidates = append(candidates, p)
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(gopath))) {
			candidates = append(candidates, filepath.Join(dir, "bin", "h2spec"))
		}
	}
	for _, p := range candidates {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	install := fmt.Sprintf("make deps, or GOBIN=$PWD/bin go install %s@%s", Package, Version)
	if os.Getenv("WSGATE_REQUIRE_H2SPEC") != "" {
		tb.Fatalf("h2spec not found and WSGATE_REQUIRE_H2SPEC is set (%s)", install)
	}
	tb.Skipf("h2spec not installed (%s); set WSGATE_REQUIRE_H2SPEC=1 to fail instead", install)
	return ""
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Options say what h2spec connects to.
type Options struct {
	// Host and Port are the listener's address.
	Host string
	Port int
	// TLS connects over TLS (ALPN h2), not verifying the certificate;
	// otherwise HTTP/2 with prior knowledge (h2c).
	TLS bool
	// Timeout is how long h2spec waits for an answer (default 2s, its
	// own); a case that passes on silence waits this long.
	Timeout time.Duration
}

// summary is h2spec's last line.
var summary = regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`)

// Run runs every h2spec case against o's listener and fails tb unless
// all Cases passed, printing the cases that failed as h2spec reports them.
func Run(tb testing.TB, o Options) {
	tb.Helper()
	bin := Binary(tb)
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	args := []string{"-h", o.Host, "-p", strconv.Itoa(o.Port), "-o", strconv.Itoa(int(max(timeout/time.Second, 1)))}
	if o.TLS {
		args = append(args, "-t", "-k")
	}
	// The whole run is bounded: 145 cases, each within a few timeouts.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "TERM=dumb")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run() // exits 1 when a case failed: the summary says which
	text := out.String()
	m := summary.FindStringSubmatch(text)
	if m == nil {
		tb.Fatalf("h2spec %s: no summary (%v):\n%s", strings.Join(args, " "), err, text)
	}
	total, _ := strconv.Atoi(m[1])
	passed, _ := strconv.Atoi(m[2])
	tb.Logf("h2spec %s: %s in %v", strings.Join(args, " "), m[0], time.Since(start).Round(time.Millisecond))
	if total != Cases || passed != Cases {
		failures := text
		if i := strings.Index(text, "Failures:"); i >= 0 {
			failures = text[i:]
		}
		tb.Errorf("h2spec %s: %s, want all %d passed:\n%s", Version, m[0], Cases, failures)
	}
}
