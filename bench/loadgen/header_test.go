package loadgen

import (
	"errors"
	"testing"
)

// TestParseHeader pins issue 19 item 6: -H takes "Name: value" with a
// token name and no control character, and refuses the headers the
// handshake writes itself.
func TestParseHeader(t *testing.T) {
	good := map[string]Header{
		"X-Token: s3cret":            {"X-Token", "s3cret"},
		"Authorization:Bearer a.b":   {"Authorization", "Bearer a.b"},
		"X-Empty:":                   {"X-Empty", ""},
		"X-Spaces: \t a b \t":        {"X-Spaces", "a b"},
		"Cookie: k=v; other=1":       {"Cookie", "k=v; other=1"},
		"x-odd!#$%&'*+-.^_`|~: ok:1": {"x-odd!#$%&'*+-.^_`|~", "ok:1"},
	}
	for in, want := range good {
		if got, err := ParseHeader(in); err != nil || got != want {
			t.Errorf("ParseHeader(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "X-Token", ": v", " X-Token: v", "X Token: v", "X-Token\t: v", "X(: v",
		"X: a\r\nInjected: 1", "X: a\nb", "X: a\x00", "X: a\x7f", "Host: h", "upgrade: x", "Connection: close",
		"Sec-WebSocket-Key: k", "Sec-WebSocket-Version: 8", "Sec-WebSocket-Protocol: p", "Sec-WebSocket-Extensions: e",
		"Content-Length: 1", "Transfer-Encoding: chunked"} {
		if h, err := ParseHeader(in); !errors.Is(err, ErrBadHeader) {
			t.Errorf("ParseHeader(%q) = %+v, %v; want ErrBadHeader", in, h, err)
		}
	}
}
