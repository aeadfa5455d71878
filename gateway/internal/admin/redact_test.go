package admin

import (
	"fmt"
	"testing"

	"github.com/wsgate/wsgate/conf"
)

// TestRedactedConfig pins secrets shown by GET /api/config: plugin config
// keys holding secrets were hidden only at the top level and in tables
// (not in arrays of tables), and URLs kept their passwords.
func TestRedactedConfig(t *testing.T) {
	m := redactMap(map[string]any{
		"hs256_secret_env": "JWT_SECRET", "secret": "x", "api_key": "k", "issuer": "me",
		"nested":          map[string]any{"password": "p", "rs256_public_key_file": "/k.pem"},
		"issuers":         []map[string]any{{"name": "a", "hs256_secret": "s1"}},
		"redis_url":       "redis://user:hunter2@10.0.0.1:6379/0",
		"upstreams":       []any{"https://svc.example/?access_token=t0k&x=1", "plain"},
		"client_password": "cp", "session_cookie": "c", "db_dsn": "host=db password=pw", "max": int64(3),
	})
	want := map[string]any{
		"hs256_secret_env": "JWT_SECRET", "secret": "REDACTED", "api_key": "REDACTED", "issuer": "me",
		"nested":          map[string]any{"password": "REDACTED", "rs256_public_key_file": "/k.pem"},
		"issuers":         []map[string]any{{"name": "a", "hs256_secret": "REDACTED"}},
		"redis_url":       "redis://user:REDACTED@10.0.0.1:6379/0",
		"upstreams":       []any{"https://svc.example/?access_token=REDACTED&x=1", "plain"},
		"client_password": "REDACTED", "session_cookie": "REDACTED", "db_dsn": "REDACTED", "max": int64(3),
	}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", m, want)
	}
}

// TestRedactedACME pins that GET /api/config hides the password of a
// redis:// ACME storage and of an ask URL, and leaves the config in force
// untouched.
func TestRedactedACME(t *testing.T) {
	c := &conf.Config{}
	c.Gateway.TLS.ACME = &conf.ACME{Storage: "redis://:hunter2@10.0.0.1:6379/2", Ask: "https://u:pw@ask.internal/ask", Directory: "https://acme.example/dir"}
	got := RedactedConfig(c).Gateway.TLS.ACME
	if got.Storage != "redis://:REDACTED@10.0.0.1:6379/2" || got.Ask != "https://u:REDACTED@ask.internal/ask" || got.Directory != "https://acme.example/dir" {
		t.Errorf("redacted ACME %+v", got)
	}
	if c.Gateway.TLS.ACME.Storage != "redis://:hunter2@10.0.0.1:6379/2" {
		t.Error("redaction changed the config in force")
	}
}
