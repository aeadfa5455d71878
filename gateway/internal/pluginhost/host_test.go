package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/plugins/auth"
)

func TestChain(t *testing.T) {
	bin := testPlugin(t)
	h, rec, _ := newHost(t, []conf.Plugin{
		spec("a", bin, map[string]any{"tag": "a", "header_name": "X-A"}),
		spec("b", bin, map[string]any{"tag": "b", "deny": true, "status": int64(401)}),
		spec("c", bin, map[string]any{"tag": "c"}),
		spec("d", bin, map[string]any{"tag": "d", "deny": true}),
	}, Options{Logger: quiet})
	for _, tc := range []struct {
		name     string
		chain    []string
		allow    bool
		status   int
		deniedBy string
		called   []string // plugins that must have been called
		skipped  []string // plugins that must not have been called
		headers  map[string]string
	}{
		{name: "empty chain allows", allow: true},
		{name: "all allow, headers merged, later wins", chain: []string{"a", "c"}, allow: true,
			called: []string{"a", "c"}, headers: map[string]string{"X-A": "a", "X-Tag": "c"}},
		{name: "first deny stops", chain: []string{"a", "b", "c"}, status: 401, deniedBy: "b",
			called: []string{"a", "b"}, skipped: []string{"c"}},
		{name: "deny first", chain: []string{"b", "a"}, status: 401, deniedBy: "b",
			called: []string{"b"}, skipped: []string{"a"}},
		{name: "deny status defaults to 403", chain: []string{"d"}, status: 403, deniedBy: "d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.events = nil
			res, err := h.Authenticate(context.Background(), tc.chain, req("/"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Allow != tc.allow || res.Status != tc.status || res.DeniedBy != tc.deniedBy {
				t.Fatalf("got %+v", res)
			}
			for _, p := range tc.called {
				if rec.count(p, false) != 1 {
					t.Errorf("%s called %d times, want 1", p, rec.count(p, false))
				}
			}
			for _, p := range tc.skipped {
				if rec.count(p, false) != 0 {
					t.Errorf("%s was called after the deny", p)
				}
			}
			for k, v := range tc.headers {
				if res.Headers[k] != v {
					t.Errorf("header %s = %q, want %q (all: %v)", k, res.Headers[k], v, res.Headers)
				}
			}
		})
	}
	t.Run("unknown plugin", func(t *testing.T) {
		res, err := h.Authenticate(context.Background(), []string{"a", "nope"}, req("/"))
		if !errors.Is(err, ErrUnknownPlugin) || res.Allow {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
}

func TestPluginErrorsFailClosed(t *testing.T) {
	bin := testPlugin(t)
	h, _, _ := newHost(t, []conf.Plugin{spec("a", bin, map[string]any{"tag": "a"})}, Options{Logger: quiet})
	for _, tc := range []struct {
		path string
		want error
	}{
		{"/error", auth.ErrPlugin},
		{"/nil", auth.ErrPlugin},
		{"/bad-header", ErrBadDecision},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res, err := h.Authenticate(context.Background(), []string{"a"}, req(tc.path))
			if !errors.Is(err, tc.want) || res.Allow {
				t.Fatalf("got %+v, %v; want %v", res, err, tc.want)
			}
		})
	}
	// The plugin is still up and deciding.
	allowAgain(t, h, []string{"a"}, req("/"), 5*time.Second)
}

// TestDenyResponseHeadersFromPlugin pins issue 19 item 16's allow-list
// through a plugin process: the headers a deny needs reach the Result,
// and a Set-Cookie or a Content-Encoding makes the decision malformed
// (the gateway answers 503), with the plugin still deciding after.
func TestDenyResponseHeadersFromPlugin(t *testing.T) {
	bin := testPlugin(t)
	h, _, _ := newHost(t, []conf.Plugin{spec("a", bin, map[string]any{"tag": "a"})}, Options{Logger: quiet})
	deny := func(query string) (Result, error) {
		r := req("/deny-headers")
		r.RawQuery = query
		return h.Authenticate(context.Background(), []string{"a"}, r)
	}
	res, err := deny("WWW-Authenticate=Bearer&Retry-After=5&Cache-Control=no-store&X-Request-Id=r1")
	if err != nil || res.Allow || res.Status != 401 {
		t.Fatalf("got %+v, %v; want a 401", res, err)
	}
	want := map[string]string{"WWW-Authenticate": "Bearer", "Retry-After": "5", "Cache-Control": "no-store", "X-Request-Id": "r1"}
	if len(res.ResponseHeaders) != len(want) {
		t.Fatalf("response headers %v, want %v", res.ResponseHeaders, want)
	}
	for k, v := range want {
		if res.ResponseHeaders[k] != v {
			t.Fatalf("response headers %v, want %v", res.ResponseHeaders, want)
		}
	}
	for _, q := range []string{"Set-Cookie=session%3Dx", "WWW-Authenticate=Bearer&Content-Encoding=gzip", "Trailer=X-A"} {
		res, err := deny(q)
		if !errors.Is(err, ErrBadDecision) || res.Allow || !strings.Contains(err.Error(), "may set") {
			t.Fatalf("%s: got %+v, %v; want %v", q, res, err, ErrBadDecision)
		}
	}
	allowAgain(t, h, []string{"a"}, req("/"), 5*time.Second)
}

func TestCache(t *testing.T) {
	bin := testPlugin(t)
	h, rec, _ := newHost(t, []conf.Plugin{
		spec("cached", bin, map[string]any{"tag": "c", "cache_key": []any{"header:X-Token", "query:t"}, "cache_ttl": "1m"}),
		spec("nokey", bin, map[string]any{"tag": "n", "cache_ttl": "1m"}),
		spec("nottl", bin, map[string]any{"tag": "z", "cache_key": []any{"header:X-Token"}}),
	}, Options{Logger: quiet})
	ctx := context.Background()
	call := func(name string, r *auth.Request) Result {
		t.Helper()
		res, err := h.Authenticate(ctx, []string{name}, r)
		if err != nil || !res.Allow {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		return res
	}
	t.Run("hit", func(t *testing.T) {
		first := call("cached", req("/", "X-Token", "one"))
		second := call("cached", req("/other", "X-Token", "one"))
		if rec.count("cached", false) != 1 || rec.count("cached", true) != 1 {
			t.Fatalf("calls %d, hits %d; want 1, 1", rec.count("cached", false), rec.count("cached", true))
		}
		if first.Headers["X-Calls"] != "1" || second.Headers["X-Calls"] != "1" {
			t.Fatalf("second call reached the plugin: %v / %v", first.Headers, second.Headers)
		}
	})
	t.Run("other key misses", func(t *testing.T) {
		before := rec.count("cached", false)
		call("cached", req("/", "X-Token", "two"))
		r := req("/", "X-Token", "one")
		r.RawQuery = "t=x"
		call("cached", r)
		if got := rec.count("cached", false) - before; got != 2 {
			t.Fatalf("%d plugin calls, want 2", got)
		}
	})
	t.Run("no cache key, no cache", func(t *testing.T) {
		call("nokey", req("/", "X-Token", "one"))
		call("nokey", req("/", "X-Token", "one"))
		if rec.count("nokey", true) != 0 || rec.count("nokey", false) != 2 {
			t.Fatal("decision without a cache key was cached")
		}
	})
	t.Run("no ttl, no cache", func(t *testing.T) {
		call("nottl", req("/", "X-Token", "one"))
		call("nottl", req("/", "X-Token", "one"))
		if rec.count("nottl", true) != 0 {
			t.Fatal("decision without a TTL was cached")
		}
	})
}

// TestKillRestart kills the plugin with SIGKILL: calls fail closed with
// ErrUnavailable until the supervisor has restarted it, then allow again.
func TestKillRestart(t *testing.T) {
	bin := testPlugin(t)
	h, _, logs := newHost(t, []conf.Plugin{spec("a", bin, map[string]any{"tag": "a"})}, Options{Logger: quiet})
	chain := []string{"a"}
	first := allowAgain(t, h, chain, req("/"), 5*time.Second)
	pid := pidOf(t, h, "a")
	in := (*h.slots.Load())["a"].cur.Load()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the plugin's exit to be seen", in.exited)
	res, err := h.Authenticate(context.Background(), chain, req("/"))
	if !errors.Is(err, ErrUnavailable) || res.Allow {
		t.Fatalf("after kill: %+v, %v; want ErrUnavailable", res, err)
	}
	again := allowAgain(t, h, chain, req("/"), 10*time.Second)
	if again.Headers["X-Pid"] == first.Headers["X-Pid"] {
		t.Fatalf("allowed by the killed process %s", first.Headers["X-Pid"])
	}
	if !strings.Contains(logs.String(), "auth plugin restarted") {
		t.Fatal("restart not logged")
	}
}

// TestCrashOnRequest: a plugin that exits in the middle of a call.
func TestCrashOnRequest(t *testing.T) {
	bin := testPlugin(t)
	h, _, _ := newHost(t, []conf.Plugin{spec("a", bin, map[string]any{"tag": "a"})}, Options{Logger: quiet})
	res, err := h.Authenticate(context.Background(), []string{"a"}, req("/crash"))
	if !errors.Is(err, ErrUnavailable) || res.Allow {
		t.Fatalf("got %+v, %v; want ErrUnavailable", res, err)
	}
	allowAgain(t, h, []string{"a"}, req("/"), 10*time.Second)
}

// TestHang: a plugin stuck in a call past its timeout fails closed and is
// killed and restarted.
func TestHang(t *testing.T) {
	bin := testPlugin(t)
	p := spec("a", bin, map[string]any{"tag": "a"})
	p.Timeout.Duration = 200 * time.Millisecond
	h, rec, logs := newHost(t, []conf.Plugin{p}, Options{HangAfter: 1})
	old := pidOf(t, h, "a")
	res, err := h.Authenticate(context.Background(), []string{"a"}, req("/hang"))
	if !errors.Is(err, ErrUnavailable) || res.Allow {
		t.Fatalf("got %+v, %v; want ErrUnavailable", res, err)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("error %q does not say it timed out", err)
	}
	again := allowAgain(t, h, []string{"a"}, req("/"), 10*time.Second)
	if again.Headers["X-Pid"] == "" || pidOf(t, h, "a") == old {
		t.Fatal("hung process was not replaced")
	}
	waitFor(t, 5*time.Second, "the hung process to be gone", func() bool { return !alive(old) })
	if rec.count("a", false) < 2 || !strings.Contains(logs.String(), "hung") {
		t.Fatalf("hang not reported; log:\n%s", logs.String())
	}
}

func TestChecksum(t *testing.T) {
	bin := testPlugin(t)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)
	t.Run("match starts", func(t *testing.T) {
		p := spec("a", bin, map[string]any{"tag": "a"})
		p.SHA256 = strings.ToUpper(good)
		h, _, _ := newHost(t, []conf.Plugin{p}, Options{Logger: quiet})
		allowAgain(t, h, []string{"a"}, req("/"), 5*time.Second)
	})
	t.Run("mismatch refuses", func(t *testing.T) {
		p := spec("a", bin, map[string]any{"tag": "a"})
		p.SHA256 = bad
		h, err := New([]conf.Plugin{p}, Options{Logger: quiet})
		if !errors.Is(err, ErrChecksum) || h != nil {
			t.Fatalf("New = %v, %v; want ErrChecksum", h, err)
		}
		for _, want := range []string{`"a"`, bin, good, bad} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	})
}

func TestStartFailures(t *testing.T) {
	bin := testPlugin(t)
	for _, tc := range []struct {
		name string
		p    conf.Plugin
		want error
	}{
		{"rejected config", spec("a", bin, map[string]any{"bad_config": true}), auth.ErrInvalidConfig},
		{"unknown config key", spec("a", bin, map[string]any{"nope": true}), auth.ErrInvalidConfig},
		{"missing executable", spec("a", bin+".missing", nil), nil},
		{"bad cache key", spec("a", bin, map[string]any{"cache_key": []any{"cookie:x"}}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := New([]conf.Plugin{tc.p}, Options{Logger: quiet})
			if err == nil || h != nil {
				t.Fatalf("New = %v, %v; want an error", h, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), `"a"`) {
				t.Fatalf("error %q does not name the plugin", err)
			}
		})
	}
}

func TestReload(t *testing.T) {
	bin := testPlugin(t)
	a := spec("a", bin, map[string]any{"tag": "v1", "slow_for": "300ms"})
	gone := spec("gone", bin, map[string]any{"tag": "g"})
	h, _, _ := newHost(t, []conf.Plugin{a, gone}, Options{Logger: quiet})
	ctx := context.Background()
	oldPid, gonePid := pidOf(t, h, "a"), pidOf(t, h, "gone")

	t.Run("timeout only keeps the process", func(t *testing.T) {
		a2 := a
		a2.Timeout.Duration = time.Second
		if err := h.Reload([]conf.Plugin{a2, gone}); err != nil {
			t.Fatal(err)
		}
		if pidOf(t, h, "a") != oldPid {
			t.Fatal("restarted for a timeout change")
		}
	})

	// A slow call in flight on the old process finishes there.
	type answer struct {
		res Result
		err error
	}
	slow := make(chan answer, 1)
	go func() {
		res, err := h.Authenticate(ctx, []string{"a"}, req("/slow"))
		slow <- answer{res, err}
	}()
	in := (*h.slots.Load())["a"].cur.Load()
	waitFor(t, 5*time.Second, "the slow call to be in flight", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.inflight > 0
	})

	a3 := a
	a3.Config = map[string]any{"tag": "v2"}
	if err := h.Reload([]conf.Plugin{a3}); err != nil {
		t.Fatal(err)
	}
	res, err := h.Authenticate(ctx, []string{"a"}, req("/"))
	if err != nil || res.Headers["X-Tag"] != "v2" {
		t.Fatalf("after reload: %+v, %v; want tag v2", res, err)
	}
	got := <-slow
	if got.err != nil || got.res.Headers["X-Tag"] != "v1" || got.res.Headers["X-Pid"] != strconv.Itoa(oldPid) {
		t.Fatalf("in-flight call: %+v, %v; want allowed by the old process", got.res, got.err)
	}
	if _, err := h.Authenticate(ctx, []string{"gone"}, req("/")); !errors.Is(err, ErrUnknownPlugin) {
		t.Fatalf("removed plugin: %v", err)
	}
	waitFor(t, 10*time.Second, "old processes to exit", func() bool { return !alive(oldPid) && !alive(gonePid) })

	t.Run("failed reload changes nothing", func(t *testing.T) {
		pid := pidOf(t, h, "a")
		bad := a3
		bad.Config = map[string]any{"bad_config": true}
		if err := h.Reload([]conf.Plugin{bad}); !errors.Is(err, auth.ErrInvalidConfig) {
			t.Fatalf("Reload = %v", err)
		}
		res, err := h.Authenticate(ctx, []string{"a"}, req("/"))
		if err != nil || res.Headers["X-Tag"] != "v2" || pidOf(t, h, "a") != pid {
			t.Fatalf("after failed reload: %+v, %v", res, err)
		}
	})
}

// TestCloseLeavesNothing: after Close no plugin process and no goroutine
// of the host is left, and calls fail closed.
func TestCloseLeavesNothing(t *testing.T) {
	bin := testPlugin(t)
	before := runtime.NumGoroutine()
	h, err := New([]conf.Plugin{
		spec("a", bin, map[string]any{"tag": "a"}),
		spec("b", bin, map[string]any{"tag": "b"}),
	}, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Authenticate(context.Background(), []string{"a", "b"}, req("/")); err != nil {
		t.Fatal(err)
	}
	pids := []int{pidOf(t, h, "a"), pidOf(t, h, "b")}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("plugin process %d still exists after Close", pid)
		}
	}
	res, err := h.Authenticate(context.Background(), []string{"a"}, req("/"))
	if !errors.Is(err, ErrUnavailable) || res.Allow {
		t.Fatalf("after Close: %+v, %v", res, err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "goroutines to return to the count before New", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func TestPluginLogsReachSlog(t *testing.T) {
	bin := testPlugin(t)
	_, _, logs := newHost(t, []conf.Plugin{spec("loud", bin, map[string]any{"tag": "x"})}, Options{Logger: quiet})
	waitFor(t, 5*time.Second, "the plugin's log line", func() bool {
		s := logs.String()
		return strings.Contains(s, "testplugin configured tag=x") && strings.Contains(s, "plugin=loud")
	})
}

// TestStartErrorText pins the exact text of a start failure. It used to
// repeat its prefixes ("pluginhost: ... auth: invalid plugin config: auth:
// invalid plugin config: json: unknown field"): each layer now adds its
// own context once, and an unknown key lists the known ones.
func TestStartErrorText(t *testing.T) {
	bin := testPlugin(t)
	for _, tc := range []struct {
		name string
		p    conf.Plugin
		want string
	}{
		{"rejected config", spec("a", bin, map[string]any{"bad_config": true}),
			`plugin "a" (` + bin + `): configure: auth: invalid plugin config: bad_config is set`},
		{"unknown config key", spec("a", bin, map[string]any{"secret_env": "X"}),
			`plugin "a" (` + bin + `): configure: auth: invalid plugin config: unknown key "secret_env" ` +
				`(known: deny, status, tag, cache_key, cache_ttl, bad_config, slow_for, header_name, started_file, release_file)`},
		{"wrong type", spec("a", bin, map[string]any{"cache_key": "header:X"}),
			`plugin "a" (` + bin + `): configure: auth: invalid plugin config: cache_key: wrong type: got string, want []string`},
		{"checksum", conf.Plugin{Name: "a", Path: bin, SHA256: strings.Repeat("0", 64)},
			`pluginhost: plugin checksum mismatch: plugin "a": ` + bin + ` has sha256 `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New([]conf.Plugin{tc.p}, Options{Logger: quiet})
			if err == nil {
				t.Fatal("New succeeded; want an error")
			}
			if got := err.Error(); got != tc.want && !(tc.name == "checksum" && strings.HasPrefix(got, tc.want)) {
				t.Fatalf("error text\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestStageCommitDiscard pins the two halves of a reload: staged plugins
// run but do not serve until Commit; Discard stops them and leaves the
// running ones serving; a stage that another reload overtook cannot
// commit.
func TestStageCommitDiscard(t *testing.T) {
	bin := testPlugin(t)
	a := spec("a", bin, map[string]any{"tag": "v1"})
	h, _, _ := newHost(t, []conf.Plugin{a}, Options{Logger: quiet})
	ctx := context.Background()
	tag := func() string {
		t.Helper()
		res, err := h.Authenticate(ctx, []string{"a"}, req("/"))
		if err != nil {
			t.Fatal(err)
		}
		return res.Headers["X-Tag"]
	}
	v := func(tag string) []conf.Plugin {
		p := a
		p.Config = map[string]any{"tag": tag}
		return []conf.Plugin{p}
	}

	st, err := h.Stage(v("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tag(); got != "v1" {
		t.Fatalf("staged plugin serves: tag %q, want v1", got)
	}
	staged := st.started[0].pid
	st.Discard()
	waitFor(t, 10*time.Second, "the discarded plugin to exit", func() bool { return !alive(staged) })
	if got := tag(); got != "v1" {
		t.Fatalf("after Discard: tag %q, want v1", got)
	}
	if err := st.Commit(); err == nil {
		t.Fatal("a discarded stage committed")
	}

	first, err := h.Stage(v("v3"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.Stage(v("v4"))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := tag(); got != "v3" {
		t.Fatalf("after Commit: tag %q, want v3", got)
	}
	overtaken := second.started[0].pid
	if err := second.Commit(); err == nil {
		t.Fatal("a stage overtaken by another reload committed")
	}
	waitFor(t, 10*time.Second, "the overtaken stage's plugin to exit", func() bool { return !alive(overtaken) })
	if got := tag(); got != "v3" {
		t.Fatalf("after the overtaken Commit: tag %q, want v3", got)
	}
}

// TestCloseStopsAStageInProgress pins Close's promise against a reload
// that is starting plugins: Close makes the stage give up, and no process
// the stage started outlives Close.
func TestCloseStopsAStageInProgress(t *testing.T) {
	bin := testPlugin(t)
	h, _, _ := newHost(t, nil, Options{Logger: quiet})
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	slow := spec("slow", bin, map[string]any{"started_file": started, "release_file": filepath.Join(dir, "never")})
	staged := make(chan error, 1)
	go func() {
		st, err := h.Stage([]conf.Plugin{slow})
		if err == nil {
			st.Discard()
			err = errors.New("staged")
		}
		staged <- err
	}()
	var pid int
	waitFor(t, 10*time.Second, "the staged plugin to start configuring", func() bool {
		b, err := os.ReadFile(started)
		pid, _ = strconv.Atoi(string(b))
		return err == nil && pid > 0
	})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("plugin %d, started by a stage, outlived Close", pid)
	}
	if err := <-staged; err == nil || err.Error() == "staged" {
		t.Fatalf("Stage during Close: %v, want an error", err)
	}
}
