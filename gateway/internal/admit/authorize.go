package admit

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/plugins/auth"
)

// Revocations says whether a subject or a credential id (either may be
// empty) is revoked now.
type Revocations interface {
	Revoked(subject, key string) bool
}

// Authorizer is the auth step of admission: the route's plugin chain,
// then the revocations in force, which outrank a cached decision.
type Authorizer struct {
	// Plugins runs the chain. It is the host itself, not an interface:
	// through a direct call the compiler sees the request does not
	// outlive it, and keeps it off the heap.
	Plugins *pluginhost.Host
	Revoked Revocations
	// TLSInfo is what the plugins learn of a request's TLS connection.
	TLSInfo func(*fasthttp.RequestCtx) *auth.TLSInfo
	Log     *slog.Logger
	// RetryAfter is retry_after (seconds), the Retry-After of a 503 when
	// a plugin gives no decision; Timeout bounds the chain
	// (handshake_timeout).
	RetryAfter int
	Timeout    time.Duration
}

// Authorize runs the route's auth chain for a request. On a deny, or when
// a plugin gives no decision, it returns the refusal to answer with (the
// plugin's status and headers, or 503: fail closed).
func (a *Authorizer) Authorize(ctx *fasthttp.RequestCtx, rt *route.Route) (pluginhost.Result, Refusal) {
	if len(rt.Auth) == 0 {
		return pluginhost.Result{Allow: true}, Refusal{}
	}
	h := &ctx.Request.Header
	req := &auth.Request{
		Method:     string(ctx.Method()),
		Host:       string(ctx.Host()),
		Path:       string(ctx.Path()),
		RawQuery:   string(ctx.URI().QueryString()),
		Header:     make(http.Header),
		ClientAddr: ctx.RemoteAddr().String(),
		TLS:        a.TLSInfo(ctx),
		Route:      rt.Name,
	}
	for k, v := range h.All() {
		req.Header.Add(string(k), string(v))
	}
	cctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	defer cancel()
	res, err := a.Plugins.Authenticate(cctx, rt.Auth, req)
	switch {
	case err != nil:
		a.Log.Warn("auth plugin gave no decision; refusing (fail closed)", "route", rt.Name, "err", err)
		return res, RetryLater(fasthttp.StatusServiceUnavailable, "auth_unavailable", "authentication unavailable", a.RetryAfter)
	case !res.Allow:
		r := Reject(res.Status, "auth_denied", res.Reason)
		r.Deny, r.DenyHeaders = true, res.ResponseHeaders
		return res, r
	case a.Revoked.Revoked(res.Subject, res.CredentialID):
		r := Reject(fasthttp.StatusUnauthorized, "auth_denied", "credential revoked")
		r.Deny = true
		return res, r
	}
	return res, Refusal{}
}
