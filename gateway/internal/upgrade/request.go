package upgrade

import (
	"net/http"
	"net/netip"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/internal/httpheader"
)

// requestBufs holds the buffers requests to nodes are rendered in.
var requestBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledRequestBuf is the largest buffer put back in requestBufs: a
// rare huge request does not stay in the pool.
const maxPooledRequestBuf = 16 << 10

// AcquireRequestBuf returns an empty buffer to render a node's request
// in; ReleaseRequestBuf gives it back.
func AcquireRequestBuf() *[]byte { return requestBufs.Get().(*[]byte) }

// ReleaseRequestBuf puts b back in the pool AcquireRequestBuf takes from,
// unless it grew too large to keep.
func ReleaseRequestBuf(b *[]byte) {
	if cap(*b) > maxPooledRequestBuf {
		return
	}
	*b = (*b)[:0]
	requestBufs.Put(b)
}

// AppendNodeRequest appends to b an admitted upgrade request rendered
// for a node: the
// target and Host it was routed by, the client's headers less hop-by-hop
// ones (RFC 9110 section 7.6.1, and any named in Connection) and the
// route's auth_headers, X-Forwarded-For and Forwarded (see
// AppendForwardedFor and AppendForwarded, with the trusted proxies) and
// X-Forwarded-Proto added, and the auth chain's
// headers set (replacing the client's own of the same name under any
// spelling, see route.SameHeader, so a client cannot forge them; an empty
// value only removes the client's).
func AppendNodeRequest(b []byte, ctx *fasthttp.RequestCtx, rt *route.Route, trusted []netip.Prefix, set map[string]string) []byte {
	h := &ctx.Request.Header
	b = append(b, "GET "...)
	b = append(b, ctx.URI().RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, ctx.Host()...)
	b = append(b, "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"...)
	var canon map[string]string
	if len(set) > 0 {
		canon = make(map[string]string, len(set))
		for k, v := range set {
			canon[http.CanonicalHeaderKey(k)] = v
		}
	}
	conn := h.PeekAll(fasthttp.HeaderConnection)
	for k, v := range h.All() {
		if !forwarded(k, conn, rt, set) {
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	// PeekAll (in AppendForwardedFor) reuses the buffer conn lives in;
	// conn is done with.
	b = append(b, "X-Forwarded-For: "...)
	b = AppendForwardedFor(b, ctx, trusted)
	b = append(b, "\r\nForwarded: "...)
	b = AppendForwarded(b, ctx, trusted)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, Scheme(ctx)...)
	b = append(b, "\r\n"...)
	for k, v := range canon {
		if v == "" {
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// forwarded reports whether the client's field k goes on to the node: not
// one the gateway sets itself (Host, X-Forwarded-For, Forwarded,
// X-Forwarded-Proto, the auth chain's), not Content-Length, not hop-by-hop (RFC 9110 section
// 7.6.1, or named in the Connection values conn), not one of the route's
// auth_headers.
func forwarded(k []byte, conn [][]byte, rt *route.Route, set map[string]string) bool {
	switch {
	case Decided(set, k), httpheader.Is(k, "host"), httpheader.Is(k, "x-forwarded-for"), httpheader.Is(k, "forwarded"), httpheader.Is(k, "x-forwarded-proto"), httpheader.Is(k, "content-length"),
		httpheader.IsHopByHop(k), rt.OwnsHeader(k), connectionListed(conn, k):
		return false
	}
	return true
}
