package main

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/plugins/auth"
	"github.com/wsgate/wsgate/plugins/auth/authtest"
)

// TestMain keeps race-enabled plugin builds from sleeping a second at exit.
func TestMain(m *testing.M) {
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func keyReq(header, query string) *auth.Request {
	h := http.Header{}
	if header != "" {
		h.Set("X-Api-Key", header)
	}
	q := url.Values{}
	if query != "" {
		q.Set("api_key", query)
	}
	return &auth.Request{Method: "GET", Path: "/", Header: h, RawQuery: q.Encode()}
}

func TestAPIKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	write(t, file, "# team keys\nk-alice alice\n\nk-bare\nk-bob bob # added 2026-01\n")
	a := authtest.Start(t, testproc.Build(t, "./plugins/apikey"), map[string]any{"file": file}, nil)
	if got := strings.Join(a.CacheKey(), " "); got != "header:X-Api-Key query:api_key" {
		t.Fatalf("CacheKey = %s", got)
	}
	for _, tc := range []struct {
		name   string
		req    *auth.Request
		status int // 0: allowed
		user   string
	}{
		{"header", keyReq("k-alice", ""), 0, "alice"},
		{"query", keyReq("", "k-bob"), 0, "bob"},
		{"header wins", keyReq("k-alice", "k-bob"), 0, "alice"},
		{"key without user", keyReq("k-bare", ""), 0, ""},
		{"unknown", keyReq("k-mallory", ""), 403, ""},
		{"comment is not a key", keyReq("#", ""), 403, ""},
		{"missing", keyReq("", ""), 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := a.Authenticate(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.status != 0 {
				if d.Allow || d.Status != tc.status {
					t.Fatalf("got allow=%v %d %q, want %d", d.Allow, d.Status, d.Reason, tc.status)
				}
				return
			}
			if !d.Allow || d.Headers["X-User-Id"] != tc.user {
				t.Fatalf("got allow=%v headers %v, want user %q", d.Allow, d.Headers, tc.user)
			}
			if d.CacheTTL != 10*time.Second {
				t.Fatalf("cache ttl %v, want the 10s default", d.CacheTTL)
			}
		})
	}
}

// waitDecision polls until key gets allowed (or not), as the reload is
// asynchronous.
func waitDecision(t *testing.T, a auth.Authenticator, key string, allow bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := a.Authenticate(context.Background(), keyReq(key, ""))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allow == allow {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q: allow still %v after 10s", key, d.Allow)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAPIKeyReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	write(t, file, "k1 one\n")
	stderr := &testproc.Buffer{}
	a := authtest.Start(t, testproc.Build(t, "./plugins/apikey"), map[string]any{
		"file": file, "user_header": "X-Who", "cache_ttl": "0s",
	}, stderr)
	waitDecision(t, a, "k1", true)

	t.Run("edit in place", func(t *testing.T) {
		write(t, file, "k2 two\n")
		waitDecision(t, a, "k2", true)
		waitDecision(t, a, "k1", false)
	})
	t.Run("rename over", func(t *testing.T) {
		tmp := filepath.Join(dir, ".keys.tmp")
		write(t, tmp, "k3 three\n")
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		waitDecision(t, a, "k3", true)
		waitDecision(t, a, "k2", false)
		d, _ := a.Authenticate(context.Background(), keyReq("k3", ""))
		if d.Headers["X-Who"] != "three" {
			t.Fatalf("headers %v", d.Headers)
		}
	})
	t.Run("empty file keeps the old keys, a comment revokes all", func(t *testing.T) {
		write(t, file, "")
		write(t, file, "k6 six\n")
		waitDecision(t, a, "k6", true)
		write(t, file, "")
		waitDecision(t, a, "k6", true)
		write(t, file, "# nobody\n")
		waitDecision(t, a, "k6", false)
	})
	t.Run("broken file keeps the old keys", func(t *testing.T) {
		write(t, file, "k3 three\n")
		waitDecision(t, a, "k3", true)
		write(t, file, "k4 four extra-field\n")
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(stderr.String(), "line 1: want") {
			if time.Now().After(deadline) {
				t.Fatalf("no reload error logged; stderr:\n%s", stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		waitDecision(t, a, "k3", true)
		write(t, file, "k5 five\n")
		waitDecision(t, a, "k5", true)
	})
}

func TestAPIKeyConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	write(t, file, "k\n")
	bin := testproc.Build(t, "./plugins/apikey")
	for _, tc := range []struct {
		name string
		cfg  map[string]any
	}{
		{"no file", map[string]any{}},
		{"missing file", map[string]any{"file": file + ".nope"}},
		{"no header nor query", map[string]any{"file": file, "header": "", "query": ""}},
		{"bad ttl", map[string]any{"file": file, "cache_ttl": int64(10)}},
		{"unknown key", map[string]any{"file": file, "keys": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := authtest.StartErr(t, bin, tc.cfg, nil); !errors.Is(err, auth.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestParseKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		err  bool
	}{
		{"empty", "", 0, false},
		{"comments and blanks", "# c\n\n  # indented\n", 0, false},
		{"forms", "a\nb user\nc user # note\n\td\tuser2\r\n", 4, false},
		{"three fields", "a b c\n", 0, true},
		{"duplicate", "a x\na y\n", 0, true},
		{"too long", strings.Repeat("x", maxKeyLine+1), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := parseKeys([]byte(tc.in))
			if (err != nil) != tc.err || len(ks) != tc.n {
				t.Fatalf("got %d keys, %v; want %d, err %v", len(ks), err, tc.n, tc.err)
			}
		})
	}
	ks, _ := parseKeys([]byte("c user # note\n"))
	if u, ok := ks.lookup("c"); !ok || u != "user" {
		t.Fatalf("lookup = %q, %v", u, ok)
	}
}

func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"", "a\n", "a b\n", "a b c\n", "#x\n", "a #b\n", "a\r\nb\r\n", "a\x00b c"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := parseKeys(b)
		if err != nil {
			return
		}
		for _, u := range ks {
			if strings.ContainsAny(u, " \t\n") || strings.HasPrefix(u, "#") {
				t.Fatalf("user id %q holds a separator or a comment", u)
			}
		}
	})
}
