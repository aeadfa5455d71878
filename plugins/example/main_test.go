package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/plugins/auth"
	"github.com/wsgate/wsgate/plugins/auth/authtest"
)

// TestMain keeps race-enabled plugin builds from sleeping a second at exit.
func TestMain(m *testing.M) {
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// TestExamplePlugin builds the example of docs/plugins.md and runs it as
// the gateway does.
func TestExamplePlugin(t *testing.T) {
	bin := testproc.Build(t, "./plugins/example")
	a := authtest.Start(t, bin, map[string]any{"token": "let-me-in", "user": "demo-user"}, nil)
	if got := a.CacheKey(); len(got) != 1 || got[0] != "header:X-Demo-Token" {
		t.Fatalf("CacheKey = %q", got)
	}
	for _, tc := range []struct {
		name   string
		token  string
		allow  bool
		status int
	}{
		{"right token", "let-me-in", true, 0},
		{"wrong token", "nope", false, 403},
		{"no token", "", false, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.token != "" {
				h.Set("X-Demo-Token", tc.token)
			}
			d, err := a.Authenticate(context.Background(), &auth.Request{Method: "GET", Path: "/", Header: h})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allow != tc.allow || d.Status != tc.status {
				t.Fatalf("got allow=%v status=%d (%s), want allow=%v status=%d", d.Allow, d.Status, d.Reason, tc.allow, tc.status)
			}
			if tc.allow && d.Headers["X-User-Id"] != "demo-user" {
				t.Fatalf("headers = %v", d.Headers)
			}
		})
	}
	t.Run("missing token config", func(t *testing.T) {
		_, err := authtest.StartErr(t, bin, map[string]any{"user": "x"}, nil)
		if !errors.Is(err, auth.ErrInvalidConfig) {
			t.Fatalf("err = %v, want ErrInvalidConfig", err)
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		_, err := authtest.StartErr(t, bin, map[string]any{"token": "x", "tokne": "y"}, nil)
		if !errors.Is(err, auth.ErrInvalidConfig) {
			t.Fatalf("err = %v, want ErrInvalidConfig", err)
		}
	})
}

// TestGuideQuotesExample keeps docs/plugins.md's "Write a plugin" in step
// with this file, which the test above builds and runs.
func TestGuideQuotesExample(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../../docs/plugins.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), "```go\n"+string(src)+"```\n") {
		t.Fatal("docs/plugins.md does not quote plugins/example/main.go verbatim; paste it again")
	}
}
