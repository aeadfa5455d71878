package pluginhost

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/plugins/auth"
)

// event is one Observer call.
type event struct {
	plugin  string
	outcome Outcome
	cached  bool
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Observe(plugin string, o Outcome, cached bool, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{plugin, o, cached})
}

// count returns how many events match plugin and cached.
func (r *recorder) count(plugin string, cached bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.plugin == plugin && e.cached == cached {
			n++
		}
	}
	return n
}

func testPlugin(t testing.TB) string {
	t.Helper()
	return testproc.Build(t, "./plugins/internal/testplugin")
}

func spec(name, path string, cfg map[string]any) conf.Plugin {
	return conf.Plugin{Name: name, Path: path, Timeout: conf.Duration{Duration: 2 * time.Second}, Config: cfg}
}

// newHost starts a host for plugins and closes it when the test ends.
func newHost(t testing.TB, plugins []conf.Plugin, o Options) (*Host, *recorder, *testproc.Buffer) {
	t.Helper()
	rec := &recorder{}
	logs := &testproc.Buffer{}
	if o.Observer == nil {
		o.Observer = rec
	}
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.BackoffMin == 0 {
		o.BackoffMin = 20 * time.Millisecond
		o.BackoffMax = 200 * time.Millisecond
	}
	h, err := New(plugins, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.Close()
		if t.Failed() {
			t.Logf("host log:\n%s", logs.String())
		}
	})
	return h, rec, logs
}

func req(path string, hdr ...string) *auth.Request {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	return &auth.Request{Method: "GET", Host: "example.com", Path: path, Header: h, ClientAddr: "127.0.0.1:40000", Route: "*/"}
}

// pidOf returns the pid of the running instance of plugin name.
func pidOf(t testing.TB, h *Host, name string) int {
	t.Helper()
	s := (*h.slots.Load())[name]
	if s == nil {
		t.Fatalf("no plugin %q", name)
	}
	in := s.cur.Load()
	if in == nil {
		t.Fatalf("plugin %q not running", name)
	}
	return in.pid
}

// alive reports whether process pid exists (and is not yet reaped).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allowAgain polls Authenticate until it allows, failing on any result
// that is neither an allow nor ErrUnavailable, and on any allow without a
// decision behind it (no X-Pid header from a plugin).
func allowAgain(t testing.TB, h *Host, chain []string, r *auth.Request, timeout time.Duration) Result {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		res, err := h.Authenticate(context.Background(), chain, r)
		switch {
		case err == nil && res.Allow:
			if res.Headers["X-Pid"] == "" {
				t.Fatalf("allowed without a plugin decision: %+v", res)
			}
			return res
		case err == nil:
			t.Fatalf("unexpected deny: %+v", res)
		case !errors.Is(err, ErrUnavailable):
			t.Fatalf("unexpected error: %v", err)
		case res.Allow:
			t.Fatalf("Allow with error %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still unavailable after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMain keeps race-enabled plugin builds from sleeping a second at exit
// (the race runtime's atexit_sleep_ms), which every stop would wait for.
func TestMain(m *testing.M) {
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// quiet is a logger for hosts whose log no test reads.
var quiet = slog.New(slog.DiscardHandler)
