package main

import (
	"bytes"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// runBinary runs the built wsgate with args and returns its exit code and
// output.
func runBinary(t *testing.T, args ...string) (int, string) {
	t.Helper()
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), args...)
	code, err := p.Wait(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return code, p.Output()
}

// TestVersion pins that -version exists (it did not): it prints the
// build on one line and exits 0 without reading a config.
func TestVersion(t *testing.T) {
	code, out := runBinary(t, "-version", "-config", "/nonexistent.toml")
	want := regexp.MustCompile(`^wsgate \S+ revision \S+( \(modified\))?( \S+)? ` +
		regexp.QuoteMeta(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) + "\n$")
	if code != 0 || !want.MatchString(out) {
		t.Fatalf("exit %d, output %q; want 0 and a match for %s", code, out, want)
	}
}

// TestHelpMentionsDemo pins that -h tells every way to run the command,
// and where the demo is (it did not mention the demo; the demo's flags
// are now in its own -h, pinned in cmd/wsgate-demo).
func TestHelpMentionsDemo(t *testing.T) {
	code, out := runBinary(t, "-h")
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	for _, want := range []string{"go run ./cmd/wsgate-demo", "wsgate -check", "-version", "-config"} {
		if !strings.Contains(out, want) {
			t.Errorf("-h does not mention %s:\n%s", want, out)
		}
	}
}

// TestDemoPointsToItsCommand pins what `wsgate demo` does since the demo
// became its own command (so that wsgate does not link the reference
// relay): one line naming that command, and exit 2, whether demo comes
// first or after flags.
func TestDemoPointsToItsCommand(t *testing.T) {
	for _, args := range [][]string{{"demo"}, {"demo", "-replicas", "3"}, {"-log-level", "debug", "demo"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if msg := errb.String(); code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "go run ./cmd/wsgate-demo") {
			t.Errorf("wsgate %s: exit %d, stderr %q; want 2 and one line naming go run ./cmd/wsgate-demo", strings.Join(args, " "), code, msg)
		}
	}
}
