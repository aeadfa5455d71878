package redact

import "testing"

// TestURL pins what a log line or the admin API shows of a URL: the
// password of its userinfo, a lone user name (a token), and the values of
// secret query parameters hidden; a URL that does not parse hidden whole.
func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://:hunter2@127.0.0.1:6379/0", "redis://:REDACTED@127.0.0.1:6379/0"},
		{"rediss://default:hunter2@cache.example:6380/1?dial_timeout=3s", "rediss://default:REDACTED@cache.example:6380/1?dial_timeout=3s"},
		{"redis://hunter2@127.0.0.1:6379", "redis://REDACTED@127.0.0.1:6379"},
		{"redis://127.0.0.1:6379/0?password=hunter2&db=1", "redis://127.0.0.1:6379/0?db=1&password=REDACTED"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:hunter2@127.0.0.1:six/0", "REDACTED"}, // does not parse: hidden whole
		{"", ""},
		{"not a url", "not a url"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
