package admit

import (
	"bytes"
	"strconv"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/httpheader"
)

// reqShape is what admission reads off the request's headers. Peek is not
// enough: it returns the first of duplicate headers, where All yields each.
// Neither shows framing as sent: fasthttp drops Content-Length when
// Transfer-Encoding is chunked, and drops "Transfer-Encoding: identity"
// altogether; the wire block (RequestHeader.RawHeaders, walked by
// AllInOrder) shows both, so a request that shows either is read again
// there.
type reqShape struct {
	upgrades, keys, versions, origins int
	auths                             int    // Authorization headers
	badName                           []byte // the first header name that is not a token
	connUpgrade, connClose            bool   // Connection lists "upgrade", "close"
	contentLength, transferEncoding   bool
	trailers                          bool // a Trailer header, or trailer fields received
}

// attempt reports whether the request tries to upgrade: any Upgrade header,
// or Connection naming upgrade.
func (sh *reqShape) attempt() bool { return sh.upgrades > 0 || sh.connUpgrade }

func readShape(h *fasthttp.RequestHeader) reqShape {
	var sh reqShape
	for k, v := range h.All() {
		sh.add(k, v)
	}
	if (sh.contentLength || sh.transferEncoding) && len(h.RawHeaders()) > 0 {
		for k := range h.AllInOrder() {
			switch {
			case httpheader.Is(k, "content-length"):
				sh.contentLength = true
			case httpheader.Is(k, "transfer-encoding"):
				sh.transferEncoding = true
			}
		}
	}
	return sh
}

// add counts one header.
func (sh *reqShape) add(k, v []byte) {
	if sh.badName == nil && !isToken(k) {
		sh.badName = k
	}
	switch {
	case httpheader.Is(k, "upgrade"):
		sh.upgrades++
	case httpheader.Is(k, "connection"):
		sh.connUpgrade = sh.connUpgrade || httpheader.HasToken(v, "upgrade")
		sh.connClose = sh.connClose || httpheader.HasToken(v, "close")
	case httpheader.Is(k, "sec-websocket-key"):
		sh.keys++
	case httpheader.Is(k, "sec-websocket-version"):
		sh.versions++
	case httpheader.Is(k, "origin"):
		sh.origins++
	case httpheader.Is(k, "authorization"):
		sh.auths++
	case httpheader.Is(k, "content-length"):
		sh.contentLength = true
	case httpheader.Is(k, "transfer-encoding"):
		sh.transferEncoding = true
	case httpheader.Is(k, "trailer"):
		// All yields Trailer for trailer fields received unannounced too.
		sh.trailers = true
	}
}

// Shape is the shape step of admission: it refuses a request whose
// framing or headers are ambiguous, an upgrade attempt that is not a valid
// WebSocket handshake (so none is ever proxied as plain HTTP), and plain
// HTTP on a route that does not take it. It reports whether the request is
// a handshake, or the refusal to answer it with.
func Shape(ctx *fasthttp.RequestCtx, rt *route.Route) (handshake bool, r Refusal) {
	h := &ctx.Request.Header
	sh := readShape(h)
	msg := ""
	switch {
	case sh.badName != nil:
		// fasthttp takes a name with a space in it ("Content Length");
		// a node's parser may not, or may read it as another header.
		msg = "header name " + quoteName(sh.badName) + " is not a token (RFC 9110 section 5.1)"
	case sh.contentLength && sh.transferEncoding:
		msg = "both Content-Length and Transfer-Encoding"
	case sh.origins > 1:
		msg = "more than one Origin header"
	case sh.auths > 1:
		// One would decide and the other be ignored; which one depends
		// on who reads them.
		msg = "more than one Authorization header"
	case sh.trailers:
		// Forwarded, they would join the header section (the node gets
		// the body with Content-Length) unseen by the checks and the auth
		// chain, which RFC 9110 section 6.5.1 forbids.
		msg = "trailer fields in a request"
	case absoluteForm(h.RequestURI()) && len(ctx.URI().Username()) > 0:
		msg = "user info in the request target"
	case len(ctx.Host()) == 0:
		// RFC 9112 section 3.2 for HTTP/1.1; an HTTP/1.0 request without
		// one has no host to route by or to send upstream either.
		msg = "request without Host"
	case !sh.attempt():
		if !rt.PlainHTTP {
			r = Reject(fasthttp.StatusUpgradeRequired, "bad_request", "this route takes websocket handshakes only")
			r.Header, r.Value = "Upgrade", "websocket"
			return false, r
		}
		return false, Refusal{}
	case upgrade.StreamOf(ctx) != nil:
		return streamShape(h, &sh)
	case !h.IsHTTP11():
		msg = "websocket handshake needs HTTP/1.1"
	case !ctx.IsGet():
		msg = "websocket handshake must use GET"
	case sh.upgrades > 1:
		msg = "more than one Upgrade header"
	case !bytes.EqualFold(h.Peek("Upgrade"), []byte("websocket")):
		msg = "only an upgrade to websocket is served"
	case !sh.connUpgrade:
		msg = "Upgrade without Connection: upgrade"
	case sh.connClose:
		msg = "Connection: close on a websocket handshake"
	case sh.transferEncoding || h.ContentLength() > 0:
		msg = "websocket handshake with a body"
	case sh.keys != 1 || !upgrade.ValidKey(h.Peek("Sec-WebSocket-Key")):
		msg = "missing, repeated or malformed Sec-WebSocket-Key"
	case sh.versions > 1:
		msg = "more than one Sec-WebSocket-Version header"
	case string(h.Peek("Sec-WebSocket-Version")) != "13":
		r = Reject(fasthttp.StatusUpgradeRequired, "bad_request", "unsupported Sec-WebSocket-Version (want 13)")
		r.Header, r.Value = "Sec-WebSocket-Version", "13"
		return false, r
	default:
		return true, Refusal{}
	}
	return false, Reject(fasthttp.StatusBadRequest, "bad_request", msg)
}

// streamShape is Shape's handshake check for an extended CONNECT on an
// HTTP/2 stream (RFC 8441), which comes as the HTTP/1.1 handshake it
// stands for: a GET whose Upgrade is the :protocol and whose Host is the
// :authority, with Connection: Upgrade (the stream's glue writes these;
// HTTP/2 itself forbids Upgrade and Connection fields, RFC 9113 section
// 8.2.2, and the stream is reset before admission if a client sends
// them). There is no Sec-WebSocket-Key to check (RFC 8441 section 5: the
// gateway makes one for the node), but Sec-WebSocket-Version must still
// be 13.
func streamShape(h *fasthttp.RequestHeader, sh *reqShape) (bool, Refusal) {
	msg := ""
	switch {
	case !h.IsGet():
		msg = "websocket handshake must be an extended CONNECT"
	case !bytes.EqualFold(h.Peek("Upgrade"), []byte("websocket")):
		msg = "only an extended CONNECT with :protocol websocket is served"
	case sh.keys > 0:
		msg = "Sec-WebSocket-Key in an extended CONNECT (RFC 8441 section 5)"
	case sh.transferEncoding || h.ContentLength() > 0:
		msg = "websocket handshake with a body"
	case sh.versions > 1:
		msg = "more than one Sec-WebSocket-Version header"
	case string(h.Peek("Sec-WebSocket-Version")) != "13":
		// 400, not 426: HTTP/2 has no upgrade to require.
		r := Reject(fasthttp.StatusBadRequest, "bad_request", "unsupported Sec-WebSocket-Version (want 13)")
		r.Header, r.Value = "Sec-WebSocket-Version", "13"
		return false, r
	default:
		return true, Refusal{}
	}
	return false, Reject(fasthttp.StatusBadRequest, "bad_request", msg)
}

// tchar marks the bytes a token may hold (RFC 9110 section 5.6.2):
// letters, digits and !#$%&'*+-.^_`|~.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// isToken reports whether a header name is a token: one or more tchars.
func isToken(k []byte) bool {
	for _, c := range k {
		if !tchar[c] {
			return false
		}
	}
	return len(k) > 0
}

// quoteName quotes a header name for an error message, cut at 64 bytes.
func quoteName(k []byte) string {
	if len(k) > 64 {
		return strconv.Quote(string(k[:64])) + "..."
	}
	return strconv.Quote(string(k))
}

// absoluteForm reports whether a request target is in absolute form
// (http://host/path) rather than origin form (/path).
func absoluteForm(target []byte) bool {
	return len(target) > 0 && target[0] != '/' && target[0] != '*'
}
