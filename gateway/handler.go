package gateway

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/internal/proxyproto"
)

// proxyTimeout bounds one plain HTTP request to a node.
const proxyTimeout = 30 * time.Second

// handle is the client listener's handler. Every request takes the one
// admission path, whatever its shape: route, the per-IP request rate,
// shape, origin, auth chain, the pool's admission rate (the connection
// limits were taken when it was accepted). Only then does it branch to the WebSocket upgrade or to the plain
// HTTP proxy, each of which forwards the request with the route's
// auth_headers and hop-by-hop headers removed and the chain's headers set.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	g := s.current()
	// ctx.Host is the host the request is forwarded with on both branches:
	// the target's for an absolute-form request (RFC 9112 section 3.2.2),
	// else the Host header. ctx.Path is the normalized path, which both
	// branches forward too.
	rt := g.routes.Match(ctx.Host(), ctx.Path())
	if rt == nil {
		s.reject(ctx, fasthttp.StatusNotFound, "no_route", "no route for this host and path")
		return
	}
	if ok, rate, burst := s.ipRate.allow(clientIP(ctx)); !ok {
		s.retryLaterAfter(ctx, fasthttp.StatusTooManyRequests, "ip_rate", "too many requests from your address",
			jitteredRetryAfter(g.retryAfter, rate, burst))
		return
	}
	upgrade, ok := s.checkShape(ctx, rt)
	if !ok {
		return
	}
	if !rt.OriginAllowed(ctx.Request.Header.Peek("Origin")) {
		s.reject(ctx, fasthttp.StatusForbidden, "origin", "origin not allowed")
		return
	}
	// Limits (max_conns, max_conns_per_ip) were applied when the
	// connection was accepted (listener.go): its slot is held by the socket
	// from accept to close, whatever the request does.
	authz, ok := s.authorize(ctx, g, rt)
	if !ok {
		return
	}
	// Last, so only requests that would reach a node take a token: a
	// flood of bad or unauthorized requests does not use up the pool's.
	if ok, rate, burst := rt.Pool.Admit.Allow(); !ok {
		retry := jitteredRetryAfter(g.retryAfter, rate, burst)
		if upgrade {
			s.overflow(ctx, g, rt, "admission", "the pool is admitting new clients at a limited rate", retry)
		} else {
			s.retryLaterAfter(ctx, fasthttp.StatusServiceUnavailable, "admission", "the pool is admitting new clients at a limited rate", retry)
		}
		return
	}
	if upgrade {
		s.serveUpgrade(ctx, g, rt, authz)
		return
	}
	s.serveHTTP(ctx, g, rt, authz.Headers)
}

// proxyHeaderFor is the PROXY version 2 header a send_proxy_v2 pool's
// node gets for ctx's connection: the client's address (the one a client
// PROXY header carried, if any) and the gateway address it connected to;
// a LOCAL header when they are not both TCP of one family.
func proxyHeaderFor(ctx *fasthttp.RequestCtx) []byte {
	return appendProxyHeader(nil, ctx)
}

// appendProxyHeader appends proxyHeaderFor(ctx) to dst.
func appendProxyHeader(b []byte, ctx *fasthttp.RequestCtx) []byte {
	src, _ := ctx.RemoteAddr().(*net.TCPAddr)
	dst, _ := ctx.LocalAddr().(*net.TCPAddr)
	if src == nil || dst == nil {
		return proxyproto.AppendLocalV2(b)
	}
	return proxyproto.AppendV2(b, src.AddrPort(), dst.AddrPort())
}

// clientIP is the request's client address, IPv4 unmapped from IPv6: the
// socket's peer, or the address its PROXY header carried.
func clientIP(ctx *fasthttp.RequestCtx) netip.Addr {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

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
			case headerIs(k, "content-length"):
				sh.contentLength = true
			case headerIs(k, "transfer-encoding"):
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
	case headerIs(k, "upgrade"):
		sh.upgrades++
	case headerIs(k, "connection"):
		sh.connUpgrade = sh.connUpgrade || hasToken(v, "upgrade")
		sh.connClose = sh.connClose || hasToken(v, "close")
	case headerIs(k, "sec-websocket-key"):
		sh.keys++
	case headerIs(k, "sec-websocket-version"):
		sh.versions++
	case headerIs(k, "origin"):
		sh.origins++
	case headerIs(k, "authorization"):
		sh.auths++
	case headerIs(k, "content-length"):
		sh.contentLength = true
	case headerIs(k, "transfer-encoding"):
		sh.transferEncoding = true
	case headerIs(k, "trailer"):
		// All yields Trailer for trailer fields received unannounced too.
		sh.trailers = true
	}
}

// checkShape is the shape step of admission: it refuses a request whose
// framing or headers are ambiguous, an upgrade attempt that is not a valid
// WebSocket handshake (so none is ever proxied as plain HTTP), and plain
// HTTP on a route that does not take it. It reports whether the request is
// a handshake, and false in ok once it has answered the client.
func (s *Server) checkShape(ctx *fasthttp.RequestCtx, rt *route.Route) (upgrade, ok bool) {
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
			s.reject(ctx, fasthttp.StatusUpgradeRequired, "bad_request", "this route takes websocket handshakes only")
			ctx.Response.Header.Set("Upgrade", "websocket")
			return false, false
		}
		return false, true
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
	case sh.keys != 1 || !validKey(h.Peek("Sec-WebSocket-Key")):
		msg = "missing, repeated or malformed Sec-WebSocket-Key"
	case sh.versions > 1:
		msg = "more than one Sec-WebSocket-Version header"
	case string(h.Peek("Sec-WebSocket-Version")) != "13":
		s.reject(ctx, fasthttp.StatusUpgradeRequired, "bad_request", "unsupported Sec-WebSocket-Version (want 13)")
		ctx.Response.Header.Set("Sec-WebSocket-Version", "13")
		return false, false
	default:
		return true, true
	}
	s.reject(ctx, fasthttp.StatusBadRequest, "bad_request", msg)
	return false, false
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

// hopByHop are the request headers that concern one connection only (RFC
// 9110 section 7.6.1, with Proxy-Connection and Proxy-Authorization, which
// are meant for a forward proxy), lowercase: never forwarded.
var hopByHop = [...]string{
	"connection", "proxy-connection", "keep-alive", "te", "transfer-encoding",
	"upgrade", "trailer", "proxy-authorization",
}

// isHopByHop reports whether header k is one of hopByHop.
func isHopByHop(k []byte) bool {
	for _, name := range hopByHop {
		if headerIs(k, name) {
			return true
		}
	}
	return false
}

// nextToken splits the first element off a comma-separated header value,
// without the whitespace around it.
func nextToken(v []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		tok, rest = v[:i], v[i+1:]
	} else {
		tok = v
	}
	return bytes.Trim(tok, " \t"), rest
}

// hasToken reports whether the comma-separated header value v lists tok,
// which must be lowercase, ignoring case.
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v = nextToken(v)
		if headerIs(t, tok) {
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
			t, v = nextToken(v)
			if len(t) == len(k) && bytes.EqualFold(t, k) {
				return true
			}
		}
	}
	return false
}

// prepareForward readies a plain request to go to a node: hop-by-hop
// headers and those Connection names removed, the route's auth_headers
// and the chain's headers removed under any spelling (see sameHeader), the
// chain's headers set (an empty value only removes the client's), the Host
// and (normalized) path the request was routed by, and X-Forwarded-For and
// X-Forwarded-Proto.
func prepareForward(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, set map[string]string) {
	h := &ctx.Request.Header
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		for len(v) > 0 {
			var t []byte
			t, v = nextToken(v)
			if len(t) > 0 {
				h.DelBytes(t)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k) // Del takes any case
	}
	var drop [][]byte // deleting while iterating would skip headers
	for k := range h.All() {
		if rt.OwnsHeader(k) || decided(set, k) {
			drop = append(drop, append([]byte(nil), k...))
		}
	}
	for _, k := range drop {
		h.DelBytes(k)
	}
	for k, v := range set {
		if v != "" {
			h.Set(k, v)
		}
	}
	h.SetHostBytes(ctx.Host())
	// The target in origin form (an absolute-form one's scheme would make
	// the client refuse a node it speaks plain HTTP to), with the
	// normalized path routing used, not the client's; asterisk-form stays.
	if t := h.RequestURI(); len(t) != 1 || t[0] != '*' {
		ctx.Request.SetRequestURIBytes(ctx.URI().RequestURI())
	}
	// Set alone would leave the client's later copies in place.
	xff := appendForwardedFor(nil, ctx, g)
	h.Del("X-Forwarded-For")
	h.SetBytesV("X-Forwarded-For", xff)
	h.Del("X-Forwarded-Proto")
	h.Set("X-Forwarded-Proto", scheme(ctx))
	// Nodes are spoken plain HTTP to: a request read on the TLS listener
	// parses as https, which the node's client refuses.
	ctx.Request.URI().SetScheme("http")
}

// appendForwardedFor appends the one X-Forwarded-For value a node gets:
// from a client in trusted_proxies, every value it sent (in one value: a
// node that reads the last header line must not get one the client
// chose), then the client's address; from any other client, its address
// alone.
func appendForwardedFor(dst []byte, ctx *fasthttp.RequestCtx, g *generation) []byte {
	ip := clientIP(ctx)
	if g.trusts(ip) {
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

// decided reports whether the client's header k is one the auth chain's
// decision sets (or removes), under any spelling (see sameHeader).
func decided(set map[string]string, k []byte) bool {
	for name := range set {
		if route.SameHeader(k, name) {
			return true
		}
	}
	return false
}

// serveHTTP proxies an admitted plain HTTP request to a node of the route's
// pool, so a relay's /info or an app's REST API works through the gateway.
// Idempotent requests move to the next node when one cannot be reached.
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, set map[string]string) {
	p := rt.Pool
	// The key is read from the request as the client sent it, as for a
	// handshake; prepareForward rewrites the headers it points into.
	hkey := bytes.Clone(rt.HashKey.Of(ctx)) // a hash pool's; nil for the others
	prepareForward(ctx, g, rt, set)
	req := &ctx.Request
	var excl [maxTries]*balancer.Node
	exclude := excl[:0]
	tries := min(p.Tries, maxTries)
	if !ctx.IsGet() && !ctx.IsHead() {
		tries = 1
	}
	for try := 0; try < tries; try++ {
		lease, err := p.Balancer.AcquireKey(exclude, hkey)
		if err != nil {
			if try == 0 {
				s.retryLater(ctx, fasthttp.StatusServiceUnavailable, "no_capacity", "no node with capacity")
				return
			}
			break
		}
		if p.SendProxy {
			err = p.DoOwnConn(lease.Node().Addr(), proxyHeaderFor(ctx), req, &ctx.Response, proxyTimeout)
		} else {
			err = p.HTTP[lease.Node()].DoTimeout(req, &ctx.Response, proxyTimeout)
		}
		lease.Release()
		if err == nil {
			return
		}
		s.log.Warn("proxy request failed", "pool", p.Name, "node", lease.Node().Addr(), "err", err)
		var nerr net.Error
		if !errors.As(err, &nerr) && !errors.Is(err, fasthttp.ErrConnectionClosed) {
			break
		}
		exclude = append(exclude, lease.Node())
	}
	ctx.Response.Reset()
	s.reject(ctx, fasthttp.StatusBadGateway, "upstream_error", "no node answered")
}
