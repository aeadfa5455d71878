package gateway

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/internal/h2serve"
	"golang.org/x/net/http/httpguts"
)

// FuzzStreamShape feeds a stream's request, as h2serve hands it over
// (pseudo-header fields and regular fields, here from the fuzzer), through
// streamRequest and admission's shape check. Neither may panic; a request
// is a WebSocket handshake only if it was an extended CONNECT with
// :protocol websocket, no Sec-WebSocket-Key and Sec-WebSocket-Version 13;
// an extended CONNECT is never left to be proxied as plain HTTP; and it
// is routed by the host an HTTP/1.1 request whose Host is the :authority
// (or, without one, the host field) is routed by.
func FuzzStreamShape(f *testing.F) {
	f.Add("CONNECT", "websocket", "gw.test", "/room/a?hello=1", "Sec-Websocket-Version", "13")
	f.Add("CONNECT", "websocket", "gw.test", "/ws", "Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	f.Add("CONNECT", "WebSocket", "gw.test", "/ws", "Sec-Websocket-Version", "13")
	f.Add("CONNECT", "", "gw.test:443", "", "", "")
	f.Add("GET", "", "gw.test", "/api/x", "Cookie", "a=1")
	f.Add("GET", "", "", "/api/x", "Host", "other.test")
	f.Add("POST", "", "gw.test", "http://evil.test/x", "Content-Length", "5")
	f.Add("OPTIONS", "", "gw.test", "*", "Upgrade", "websocket")
	rt := &route.Route{Name: "*/", PlainHTTP: true}
	f.Fuzz(func(t *testing.T, method, protocol, authority, path, k, v string) {
		for _, fv := range []string{method, protocol, authority, path, v} {
			if !httpguts.ValidHeaderFieldValue(fv) {
				t.Skip("a value the Framer refuses before h2serve sees it")
			}
		}
		if k != "" && !httpguts.ValidHeaderFieldName(k) {
			t.Skip("a name the Framer refuses")
		}
		req := &h2serve.Request{Method: method, Protocol: protocol, Authority: authority, Path: path, Header: http.Header{}}
		if k != "" {
			k = http.CanonicalHeaderKey(k)
			req.Header[k] = append(req.Header[k], v)
			if k != "Sec-Websocket-Version" {
				req.Header.Set("Sec-Websocket-Version", "13")
			}
		}
		ctx := new(fasthttp.RequestCtx)
		ctx.Init2(&clientStream{}, nil, true)
		extended, status, _ := streamRequest(ctx, req)
		host := authority
		if host == "" {
			host = req.Header.Get("Host")
		}
		if status != 0 {
			if (method != http.MethodConnect || protocol != "") && !strings.ContainsAny(host, "@ \t") {
				t.Fatalf("refused %q %q (host %q) with %d", method, protocol, host, status)
			}
			return
		}
		if extended != (method == http.MethodConnect && protocol != "") {
			t.Fatalf("%q %q: extended %v", method, protocol, extended)
		}
		handshake, r := admit.Shape(ctx, rt)
		if handshake {
			switch {
			case !extended || !strings.EqualFold(protocol, "websocket"):
				t.Fatalf("a handshake from %q %q", method, protocol)
			case len(ctx.Request.Header.Peek("Sec-WebSocket-Key")) > 0:
				t.Fatal("a handshake with a client's Sec-WebSocket-Key")
			case string(ctx.Request.Header.Peek("Sec-WebSocket-Version")) != "13":
				t.Fatal("a handshake without Sec-WebSocket-Version 13")
			case r.Refused():
				t.Fatal("a handshake and a refusal")
			}
		}
		if extended && !handshake && !r.Refused() {
			t.Fatalf("an extended CONNECT (%q) neither a handshake nor refused: it would be proxied as plain HTTP", protocol)
		}
		// Routing reads ctx.Host(): the :authority, or the host field
		// without one. (h2serve lets only an origin-form :path through,
		// or "*"; an absolute-form target would name a host of its own.)
		if strings.HasPrefix(path, "/") && !strings.ContainsAny(path+host, " \r\n") {
			var h1 fasthttp.Request
			raw := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
			if h1.Read(bufio.NewReader(strings.NewReader(raw))) == nil && !bytes.Equal(ctx.Host(), h1.Host()) {
				t.Fatalf("routed by host %q; over HTTP/1.1, Host %q routes by %q", ctx.Host(), host, h1.Host())
			}
		}
	})
}
