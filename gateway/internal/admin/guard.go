package admin

import (
	"mime"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// adminHeader is the request header that, like "Content-Type:
// application/json", marks a state-changing admin request as sent by a
// script or by the dashboard: a page on another site cannot send it
// without a CORS preflight, which the admin listener never grants.
const adminHeader = "X-Wsgate-Admin"

// ownHost checks that the request's Host header names this admin listener,
// and answers 403 when it does not. A DNS-rebinding page (evil.example
// first resolving to the attacker, then to 127.0.0.1) reaches the listener
// with its own name in Host; refusing names that are not ours keeps such a
// page from reading the node list, the config or the metrics, and from
// steering the gateway. Ours are: any IP address (a browser sends one only
// for a page loaded from that very address, so no rebinding page can),
// localhost, the host of admin.listen, and the names in admin.hosts. The
// port is not compared: ssh -L, container port maps and proxies change it,
// and a rebinding page cannot choose the name. A request without Host is
// sent by no browser and passes. An absolute-form target's host (which
// RFC 9112 section 3.2.2 puts before Host) must be ours too.
func (a *API) ownHost(ctx *fasthttp.RequestCtx) bool {
	for _, raw := range [...][]byte{ctx.Request.Header.Host(), ctx.Host()} {
		if host, ok := a.isOwn(string(raw)); !ok {
			jsonError(ctx, fasthttp.StatusForbidden, "Host "+strconv.Quote(string(raw))+" does not name this admin listener (a DNS-rebinding page would send its own name): "+
				"use an IP address or localhost, or add "+strconv.Quote(host)+" to admin.hosts")
			return false
		}
	}
	return true
}

// isOwn reports whether the Host value raw names this admin listener (see
// ownHost), and returns its host part.
func (a *API) isOwn(raw string) (string, bool) {
	if raw == "" {
		return "", true
	}
	host := hostOnly(raw)
	if _, err := netip.ParseAddr(host); err == nil {
		return host, true
	}
	if host == "localhost" || (a.listenHost != "" && host == hostOnly(a.listenHost)) {
		return host, true
	}
	for _, h := range a.gw.Config().Admin.Hosts {
		if strings.EqualFold(host, strings.TrimSuffix(h, ".")) {
			return host, true
		}
	}
	return host, false
}

// hostOnly returns the lowercase host of a Host header value or listen
// address, without port, IPv6 brackets or a final dot.
func hostOnly(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil { // no port
		h = hostport
		if inner, ok := strings.CutPrefix(h, "["); ok && strings.HasSuffix(inner, "]") {
			h = strings.TrimSuffix(inner, "]")
		}
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// crossSiteSafe lets through a request that cannot change state (GET,
// HEAD: a page on another site cannot read their answers, and Host is
// checked against rebinding) and refuses one that may (any other method)
// when a web page on another site could have sent it. A browser sends
// such a request without asking the listener first (no CORS preflight)
// only as a form (urlencoded, multipart or text/plain) or a fetch with one
// of those content types or none, and then always with its Origin. So:
// an Origin that is not the listener's own, or "null" (a sandboxed frame, a
// file:// page, a redirect), gets 403; a request with neither
// "Content-Type: application/json" nor an X-Wsgate-Admin header gets 415.
// A script (curl, the dashboard) sends one of the two and no foreign
// Origin. The checks hold with or without a bearer token.
func crossSiteSafe(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsGet() || ctx.IsHead() {
		return true
	}
	if origin := string(ctx.Request.Header.Peek(fasthttp.HeaderOrigin)); origin != "" {
		host := string(ctx.Request.Header.Host())
		u, err := url.Parse(origin)
		if origin == "null" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, host) {
			jsonError(ctx, fasthttp.StatusForbidden, "Origin "+strconv.Quote(origin)+" is not this admin listener's own (http://"+host+
				"): a page on another site may not change admin state")
			return false
		}
	}
	if len(ctx.Request.Header.Peek(adminHeader)) > 0 {
		return true
	}
	ct := string(ctx.Request.Header.ContentType())
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	got := "none"
	if ct != "" {
		got = strconv.Quote(ct)
	}
	jsonError(ctx, fasthttp.StatusUnsupportedMediaType, "a request that changes admin state needs \"Content-Type: application/json\" or an \""+
		adminHeader+": 1\" header, which a page on another site cannot send; got Content-Type "+got)
	return false
}
