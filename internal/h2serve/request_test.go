package h2serve

import (
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

func fields(kv ...string) []hpack.HeaderField {
	var fs []hpack.HeaderField
	for i := 0; i+1 < len(kv); i += 2 {
		fs = append(fs, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return fs
}

func TestParseRequest(t *testing.T) {
	xconnect := []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "relay", ":path", "/room/a?since=e.1"}
	with := func(extra ...string) []string { return append(append([]string(nil), xconnect...), extra...) }
	for _, tc := range []struct {
		name string
		kv   []string
		bad  string // a part of the reason; "" for a valid request
	}{
		{"extended CONNECT", with("sec-websocket-version", "13", "sec-websocket-protocol", "relay.v1"), ""},
		{"GET", []string{":method", "GET", ":scheme", "http", ":path", "/healthz", ":authority", "x"}, ""},
		{"plain CONNECT", []string{":method", "CONNECT", ":authority", "host:443"}, ""},
		{"OPTIONS *", []string{":method", "OPTIONS", ":scheme", "http", ":path", "*"}, ""},
		{"te trailers", with("te", "trailers"), ""},
		{"no method", []string{":scheme", "http", ":path", "/"}, "no :method"},
		{"extended CONNECT without path", []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "a"}, "RFC 8441"},
		{"extended CONNECT without authority", []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":path", "/"}, "RFC 8441"},
		{"plain CONNECT with path", []string{":method", "CONNECT", ":authority", "a", ":path", "/"}, "section 8.5"},
		{":protocol on GET", []string{":method", "GET", ":protocol", "websocket", ":scheme", "http", ":path", "/"}, "not CONNECT"},
		{"GET without path", []string{":method", "GET", ":scheme", "http"}, "no :scheme or :path"},
		{"relative path", []string{":method", "GET", ":scheme", "http", ":path", "room"}, "absolute"},
		{"unknown pseudo-header", with(":status", "200"), "pseudo-header"},
		{"connection", with("connection", "upgrade"), "connection-specific"},
		{"upgrade", with("upgrade", "websocket"), "connection-specific"},
		{"transfer-encoding", with("transfer-encoding", "chunked"), "connection-specific"},
		{"te gzip", with("te", "gzip"), "te"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, why := parseRequest(fields(tc.kv...))
			if tc.bad == "" {
				if req == nil {
					t.Fatalf("refused: %s", why)
				}
				return
			}
			if req != nil || !strings.Contains(why, tc.bad) {
				t.Fatalf("parseRequest = %+v, %q; want a refusal naming %q", req, why, tc.bad)
			}
		})
	}
	req, _ := parseRequest(fields(with("sec-websocket-protocol", "a", "sec-websocket-protocol", "b", "cookie", "c=1")...))
	if req.Method != "CONNECT" || req.Protocol != "websocket" || req.Path != "/room/a?since=e.1" || req.Authority != "relay" || req.Scheme != "http" {
		t.Fatalf("pseudo-header fields: %+v", req)
	}
	if got := req.Header["Sec-Websocket-Protocol"]; len(got) != 2 || req.Header.Get("Cookie") != "c=1" {
		t.Fatalf("fields: %v", req.Header)
	}
}

// TestParseRequestNeverIndexed pins that the fields a client sent as
// never-indexed literals are named, so that the gateway forwards them as
// such (RFC 7541 section 7.1.3); others are not.
func TestParseRequestNeverIndexed(t *testing.T) {
	fs := fields(":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", "relay", ":path", "/a?t=1",
		"x-token", "secret", "origin", "https://o")
	fs[4].Sensitive, fs[5].Sensitive = true, true
	req, why := parseRequest(fs)
	if req == nil {
		t.Fatal(why)
	}
	if len(req.NeverIndexed) != 2 || !req.NeverIndexed[":path"] || !req.NeverIndexed["x-token"] {
		t.Fatalf("NeverIndexed %v, want :path and x-token", req.NeverIndexed)
	}
}
