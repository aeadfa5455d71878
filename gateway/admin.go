package gateway

import (
	"github.com/valyala/fasthttp"
)

// handleAdmin serves the admin listener: liveness and readiness for now.
func (s *Server) handleAdmin(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/healthz":
		ctx.SetBodyString("ok\n")
	case "/readyz":
		switch {
		case s.draining.Load():
			ctx.Error("draining\n", fasthttp.StatusServiceUnavailable)
		case !s.ready.Load():
			ctx.Error("not ready\n", fasthttp.StatusServiceUnavailable)
		default:
			ctx.SetBodyString("ready\n")
		}
	default:
		ctx.Error("not found\n", fasthttp.StatusNotFound)
	}
}
