package admit

import (
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
)

// NoRoute is the refusal of a request no route matches, the first step of
// admission.
func NoRoute() Refusal {
	return Reject(fasthttp.StatusNotFound, "no_route", "no route for this host and path")
}

// Origin is the origin step of admission: a request whose Origin the
// route does not allow is refused 403.
func Origin(ctx *fasthttp.RequestCtx, rt *route.Route) Refusal {
	if !rt.OriginAllowed(ctx.Request.Header.Peek("Origin")) {
		return Reject(fasthttp.StatusForbidden, "origin", "origin not allowed")
	}
	return Refusal{}
}
