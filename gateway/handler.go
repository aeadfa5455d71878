package gateway

import (
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
)

// proxyTimeout bounds one plain HTTP request to a node.
const proxyTimeout = 30 * time.Second

// handle is the client listener's handler: route, then upgrade or proxy.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	g := s.current()
	rt := g.routes.match(ctx.Host(), ctx.Path())
	if rt == nil {
		s.reject(ctx, fasthttp.StatusNotFound, "no_route", "no route for this host and path")
		return
	}
	if isUpgrade(&ctx.Request.Header) {
		s.serveUpgrade(ctx, g, rt)
		return
	}
	s.serveHTTP(ctx, rt)
}

// serveHTTP proxies a plain HTTP request to a node of the route's pool, so a
// relay's /info or an app's REST API works through the gateway. Idempotent
// requests move to the next node when one cannot be reached.
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx, rt *route) {
	p := rt.pool
	req := &ctx.Request
	h := &req.Header
	if prior := h.Peek("X-Forwarded-For"); len(prior) > 0 {
		h.Set("X-Forwarded-For", string(prior)+", "+ctx.RemoteIP().String())
	} else {
		h.Set("X-Forwarded-For", ctx.RemoteIP().String())
	}
	h.Set("X-Forwarded-Proto", scheme(ctx))

	var excl [maxTries]*balancer.Node
	exclude := excl[:0]
	tries := min(p.tries, maxTries)
	if !ctx.IsGet() && !ctx.IsHead() {
		tries = 1
	}
	for try := 0; try < tries; try++ {
		lease, err := p.bal.Acquire(exclude)
		if err != nil {
			if try == 0 {
				s.retryLater(ctx, fasthttp.StatusServiceUnavailable, "no_capacity", "no node with capacity")
				return
			}
			break
		}
		err = p.http[lease.Node()].DoTimeout(req, &ctx.Response, proxyTimeout)
		lease.Release()
		if err == nil {
			return
		}
		s.log.Warn("proxy request failed", "pool", p.name, "node", lease.Node().Addr(), "err", err)
		var nerr net.Error
		if !errors.As(err, &nerr) && !errors.Is(err, fasthttp.ErrConnectionClosed) {
			break
		}
		exclude = append(exclude, lease.Node())
	}
	ctx.Response.Reset()
	s.reject(ctx, fasthttp.StatusBadGateway, "upstream_error", "no node answered")
}
