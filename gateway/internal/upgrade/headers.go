package upgrade

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/internal/proxyproto"
)

// HopByHop are the request headers that concern one connection only (RFC
// 9110 section 7.6.1, with Proxy-Connection and Proxy-Authorization, which
// are meant for a forward proxy), lowercase: never forwarded.
var HopByHop = [...]string{
	"connection", "proxy-connection", "keep-alive", "te", "transfer-encoding",
	"upgrade", "trailer", "proxy-authorization",
}

// IsHopByHop reports whether header k is one of HopByHop.
func IsHopByHop(k []byte) bool {
	for _, name := range HopByHop {
		if HeaderIs(k, name) {
			return true
		}
	}
	return false
}

// NextToken splits the first element off a comma-separated header value,
// without the whitespace around it.
func NextToken(v []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		tok, rest = v[:i], v[i+1:]
	} else {
		tok = v
	}
	return bytes.Trim(tok, " \t"), rest
}

// HasToken reports whether the comma-separated header value v lists tok,
// which must be lowercase, ignoring case.
func HasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v = NextToken(v)
		if HeaderIs(t, tok) {
			return true
		}
	}
	return false
}

// connectionListed reports whether header k is named in one of the
// Connection header values conn, which makes it hop-by-hop.
func connectionListed(conn [][]byte, k []byte) bool {
	for _, v := range conn {
		for len(v) > 0 {
			var t []byte
			t, v = NextToken(v)
			if len(t) == len(k) && bytes.EqualFold(t, k) {
				return true
			}
		}
	}
	return false
}

// HeaderIs reports whether the header name k equals name, which must be
// lowercase ASCII, ignoring the case of k.
func HeaderIs(k []byte, name string) bool {
	return len(k) == len(name) && route.EqualFoldSuffix(k, name)
}

// Decided reports whether the client's header k is one the auth chain's
// decision sets (or removes), under any spelling (see route.SameHeader).
func Decided(set map[string]string, k []byte) bool {
	for name := range set {
		if route.SameHeader(k, name) {
			return true
		}
	}
	return false
}

// ClientIP is the request's client address, IPv4 unmapped from IPv6: the
// socket's peer, or the address its PROXY header carried.
func ClientIP(ctx *fasthttp.RequestCtx) netip.Addr {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// Trusts reports whether ip is in one of the trusted prefixes
// (gateway.trusted_proxies).
func Trusts(trusted []netip.Prefix, ip netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// AppendForwardedFor appends the one X-Forwarded-For value a node gets:
// from a client in trusted (gateway.trusted_proxies), every value it sent
// (in one value: a node that reads the last header line must not get one
// the client chose), then the client's address; from any other client,
// its address alone.
func AppendForwardedFor(dst []byte, ctx *fasthttp.RequestCtx, trusted []netip.Prefix) []byte {
	ip := ClientIP(ctx)
	if Trusts(trusted, ip) {
		for _, v := range ctx.Request.Header.PeekAll("X-Forwarded-For") {
			dst = append(dst, v...)
			dst = append(dst, ", "...)
		}
	}
	if !ip.IsValid() {
		return append(dst, ip.String()...)
	}
	return ip.AppendTo(dst)
}

// Scheme is the X-Forwarded-Proto of a request: https on the TLS
// listener, else http.
func Scheme(ctx *fasthttp.RequestCtx) string {
	if ctx.IsTLS() {
		return "https"
	}
	return "http"
}

// ProxyHeaderFor is the PROXY version 2 header a send_proxy_v2 pool's
// node gets for ctx's connection: the client's address (the one a client
// PROXY header carried, if any) and the gateway address it connected to;
// a LOCAL header when they are not both TCP of one family.
func ProxyHeaderFor(ctx *fasthttp.RequestCtx) []byte {
	return AppendProxyHeader(nil, ctx)
}

// AppendProxyHeader appends ProxyHeaderFor(ctx) to dst.
func AppendProxyHeader(b []byte, ctx *fasthttp.RequestCtx) []byte {
	src, _ := ctx.RemoteAddr().(*net.TCPAddr)
	dst, _ := ctx.LocalAddr().(*net.TCPAddr)
	if src == nil || dst == nil {
		return proxyproto.AppendLocalV2(b)
	}
	return proxyproto.AppendV2(b, src.AddrPort(), dst.AddrPort())
}
