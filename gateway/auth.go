package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/revoke"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/plugins/auth"
)

// DefaultRevokeTTL is how long a revoked subject is refused new handshakes
// when the revocation names no ttl (see revoke.DefaultTTL).
const DefaultRevokeTTL = revoke.DefaultTTL

// authorize runs the route's auth chain for a handshake. On a deny or when
// a plugin gives no decision it answers the client itself (the plugin's
// status, or 503: fail closed) and returns false.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route) (pluginhost.Result, bool) {
	if len(rt.Auth) == 0 {
		return pluginhost.Result{Allow: true}, true
	}
	h := &ctx.Request.Header
	req := &auth.Request{
		Method:     string(ctx.Method()),
		Host:       string(ctx.Host()),
		Path:       string(ctx.Path()),
		RawQuery:   string(ctx.URI().QueryString()),
		Header:     make(http.Header),
		ClientAddr: ctx.RemoteAddr().String(),
		TLS:        tlsInfo(ctx),
		Route:      rt.Name,
	}
	for k, v := range h.All() {
		req.Header.Add(string(k), string(v))
	}
	cctx, cancel := context.WithTimeout(context.Background(), g.handshakeTimeout)
	defer cancel()
	res, err := s.plugins.Authenticate(cctx, rt.Auth, req)
	switch {
	case err != nil:
		s.log.Warn("auth plugin gave no decision; refusing (fail closed)", "route", rt.Name, "err", err)
		s.retryLater(ctx, fasthttp.StatusServiceUnavailable, "auth_unavailable", "authentication unavailable")
		return res, false
	case !res.Allow:
		s.reject(ctx, res.Status, "auth_denied", res.Reason)
		setDenyHeaders(ctx, res.Status, res.ResponseHeaders)
		return res, false
	case s.revocations.Revoked(res.Subject, res.CredentialID):
		s.reject(ctx, fasthttp.StatusUnauthorized, "auth_denied", "credential revoked")
		setDenyHeaders(ctx, fasthttp.StatusUnauthorized, nil)
		return res, false
	}
	return res, true
}

// defaultChallenge is the WWW-Authenticate of a 401 whose plugin set
// none: a 401 must carry one (RFC 9110, section 15.5.2).
const defaultChallenge = `Bearer realm="wsgate"`

// setDenyHeaders sets a deny answer's headers: the plugin's (checked by
// pluginhost: names a deny may set, no control characters), and on
// a 401 without a challenge, defaultChallenge. It runs after reject,
// which resets the response headers.
func setDenyHeaders(ctx *fasthttp.RequestCtx, status int, headers map[string]string) {
	challenged := false
	for k, v := range headers {
		ctx.Response.Header.Set(k, v)
		challenged = challenged || strings.EqualFold(k, "WWW-Authenticate")
	}
	if status == fasthttp.StatusUnauthorized && !challenged {
		ctx.Response.Header.Set("WWW-Authenticate", defaultChallenge)
	}
}
