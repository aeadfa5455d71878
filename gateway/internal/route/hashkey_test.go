package route

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHashKeyOf checks where each hash_key form finds a request's key, and
// that a request without it has none (nil or empty: least connections).
func TestHashKeyOf(t *testing.T) {
	tests := []struct {
		hashKey, uri, header, want string
	}{
		{"path:2", "/room/abc", "", "abc"},
		{"path:1", "/room/abc", "", "room"},
		{"path:2", "/room/abc/def?room=q", "", "abc"},
		{"path:3", "/room/abc", "", ""},
		{"path:2", "/room/", "", ""},
		{"path:2", "/room/a%20b", "", "a b"}, // the decoded path routes match
		{"query:room", "/room/x?room=abc&other=1", "", "abc"},
		{"query:room", "/room/x?other=1", "", ""},
		{"header:X-Room", "/room/x", "abc", "abc"},
		{"header:x-room", "/room/x", "abc", "abc"},
		{"header:X-Room", "/room/x", "", ""},
		{"", "/room/abc", "abc", ""},
	}
	for _, tt := range tests {
		t.Run(tt.hashKey+" "+tt.uri, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.SetRequestURI(tt.uri)
			if tt.header != "" {
				ctx.Request.Header.Set("X-Room", tt.header)
			}
			if got := string(ParseHashKey(tt.hashKey).Of(&ctx)); got != tt.want {
				t.Fatalf("key = %q, want %q", got, tt.want)
			}
		})
	}
}
