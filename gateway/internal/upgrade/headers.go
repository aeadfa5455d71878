package upgrade

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/internal/httpheader"
	"github.com/wsgate/wsgate/internal/proxyproto"
)

// connectionListed reports whether header k is named in one of the
// Connection header values conn, which makes it hop-by-hop.
func connectionListed(conn [][]byte, k []byte) bool {
	for _, v := range conn {
		for len(v) > 0 {
			var t []byte
			t, v = httpheader.NextToken(v)
			if len(t) == len(k) && bytes.EqualFold(t, k) {
				return true
			}
		}
	}
	return false
}

// Decided reports whether the client's header k is one the auth chain's
// decision sets (or removes), under any spelling (see route.SameHeader).
func Decided(set map[string]string, k []byte) bool {
	for name := range set {
		if httpheader.Same(k, name) {
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

// AppendForwarded appends the one Forwarded value (RFC 7239) a node gets,
// as AppendForwardedFor does X-Forwarded-For: from a client in trusted,
// every element it sent, then the gateway's own; from any other client,
// the gateway's own alone, so a client cannot name another address (or
// protocol, host) to a node that reads this field rather than
// X-Forwarded-For. The gateway's element is for= the client's address
// (an IPv6 one quoted in brackets, section 6; "unknown" when it has
// none) and proto= its Scheme.
func AppendForwarded(dst []byte, ctx *fasthttp.RequestCtx, trusted []netip.Prefix) []byte {
	ip := ClientIP(ctx)
	if Trusts(trusted, ip) {
		for _, v := range ctx.Request.Header.PeekAll("Forwarded") {
			dst = append(dst, v...)
			dst = append(dst, ", "...)
		}
	}
	dst = append(dst, "for="...)
	switch {
	case !ip.IsValid():
		dst = append(dst, "unknown"...)
	case ip.Is6():
		dst = append(dst, `"[`...)
		dst = ip.AppendTo(dst)
		dst = append(dst, `]"`...)
	default:
		dst = ip.AppendTo(dst)
	}
	dst = append(dst, ";proto="...)
	return append(dst, Scheme(ctx)...)
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
