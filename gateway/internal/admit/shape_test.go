package admit

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// handshakeHeader is a browser-like WebSocket handshake, parsed.
func handshakeHeader(tb testing.TB) *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	raw := "GET /room/r1?x=1 HTTP/1.1\r\nHost: gw.example\r\nUser-Agent: Mozilla/5.0\r\n" +
		"Accept: */*\r\nAccept-Language: en\r\nAccept-Encoding: gzip, deflate, br\r\n" +
		"Sec-WebSocket-Version: 13\r\nOrigin: https://app.example\r\n" +
		"Sec-WebSocket-Extensions: permessage-deflate\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Connection: keep-alive, Upgrade\r\nCookie: a=b\r\nPragma: no-cache\r\nCache-Control: no-cache\r\n" +
		"Upgrade: websocket\r\n\r\n"
	if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		tb.Fatal(err)
	}
	return &h
}

// TestReadShapeAllocatesNothing pins that the shape step adds no
// allocation to a handshake.
func TestReadShapeAllocatesNothing(t *testing.T) {
	h := handshakeHeader(t)
	var sh reqShape
	allocs := testing.AllocsPerRun(100, func() { sh = readShape(h) })
	if allocs != 0 {
		t.Fatalf("readShape allocates %v times per request", allocs)
	}
	if sh.upgrades != 1 || !sh.connUpgrade || sh.keys != 1 || sh.versions != 1 || sh.origins != 1 {
		t.Fatalf("shape %+v", sh)
	}
}

// BenchmarkReadShape measures the shape step on a browser's handshake.
//
//	go test -run '^$' -bench BenchmarkReadShape ./gateway/internal/admit
func BenchmarkReadShape(b *testing.B) {
	h := handshakeHeader(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = readShape(h)
	}
}
