package upgrade

import (
	"bufio"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
)

// TestAcceptKey checks Sec-WebSocket-Accept against RFC 6455 section
// 1.3's example, and that AppendAccept allocates nothing.
func TestAcceptKey(t *testing.T) {
	key := []byte("dGhlIHNhbXBsZSBub25jZQ==")
	if got, want := AcceptKey(key), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; got != want {
		t.Fatalf("AcceptKey = %q, want %q", got, want)
	}
	var b [AcceptLen]byte
	if n := testing.AllocsPerRun(100, func() { _ = AppendAccept(b[:0], key) }); n != 0 {
		t.Fatalf("AppendAccept allocates %v times", n)
	}
}

// TestValidKey checks that a key must be base64 of 16 bytes.
func TestValidKey(t *testing.T) {
	for key, want := range map[string]bool{
		"dGhlIHNhbXBsZSBub25jZQ==": true,
		"dGhlIHNhbXBsZSBub25jZQ":   false, // unpadded
		"dGhlIHNhbXBsZSBub25jZQ=x": false,
		"AAAAAAAAAAAAAAAAAAAAAAAA": false, // 18 bytes
		"":                         false,
	} {
		if got := ValidKey([]byte(key)); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestClientResponse checks the client's 101 keeps the node's headers but
// the framing ones (names as fasthttp's reader normalized them, as
// DialNode reads them).
func TestClientResponse(t *testing.T) {
	var h fasthttp.ResponseHeader
	raw := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: upgrade\r\n" +
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: chat\r\n" +
		"Content-Length: 0\r\nContent-Type: text/plain\r\n\r\n"
	if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	got := string(clientResponse(nil, &h))
	want := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-Websocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-Websocket-Protocol: chat\r\n\r\n"
	if got != want {
		t.Fatalf("clientResponse:\n%q\nwant\n%q", got, want)
	}
}

// TestNodeStreamRequestNeverIndexed pins that the fields a client over
// HTTP/2 sent never-indexed (NeverIndexedKey, set by the gateway's HTTP/2
// front) stay named on the extended CONNECT to the node, which sends them
// never-indexed (RFC 7541 section 7.1.3).
func TestNodeStreamRequestNeverIndexed(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/ws?t=1")
	ctx.Request.Header.SetHost("gw.test")
	ctx.Request.Header.Set("X-Token", "secret")
	if req := NodeStreamRequest(&ctx, &route.Route{}, nil, nil); req.NeverIndexed != nil {
		t.Fatalf("NeverIndexed %v for a client that named none", req.NeverIndexed)
	}
	ctx.SetUserValue(NeverIndexedKey, map[string]bool{"x-token": true})
	if req := NodeStreamRequest(&ctx, &route.Route{}, nil, nil); !req.NeverIndexed["x-token"] {
		t.Fatalf("NeverIndexed %v, want x-token", req.NeverIndexed)
	}
}

// TestForwardedElement checks the gateway's own Forwarded element (RFC
// 7239): an IPv6 address quoted in brackets, the client's elements kept
// only from a trusted peer, and the same value on the extended CONNECT an
// "h2" pool's node gets, the client's own left out.
func TestForwardedElement(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct{ from, want string }{
		{"192.0.2.7:1000", "for=192.0.2.7;proto=http"},
		{"[2001:db8::1]:1000", `for="[2001:db8::1]";proto=http`},
		{"10.1.2.3:1000", "for=6.6.6.6, for=10.1.2.3;proto=http"},
	} {
		var req fasthttp.Request
		req.Header.Set("Forwarded", "for=6.6.6.6")
		req.SetRequestURI("/x")
		req.Header.SetHost("gw")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tc.from)), nil)
		if got := string(AppendForwarded(nil, &ctx, trusted)); got != tc.want {
			t.Errorf("from %s: %q, want %q", tc.from, got, tc.want)
		}
		sreq := NodeStreamRequest(&ctx, &route.Route{}, trusted, nil)
		if got := sreq.Header["Forwarded"]; len(got) != 1 || got[0] != tc.want {
			t.Errorf("from %s: the node stream's Forwarded %q, want %q", tc.from, got, tc.want)
		}
	}
}
