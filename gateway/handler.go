package gateway

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/revoke"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
)

// handle is the client listener's handler. Every request takes the one
// admission path, whatever its shape (package admit lists the steps, and
// where admission happens outside it): route, the per-IP request rate,
// shape, origin, auth chain, the pool's admission rate (the connection
// limits were taken when it was accepted). Only then does it branch to
// the WebSocket upgrade or to the plain HTTP proxy, each of which
// forwards the request with the route's auth_headers and hop-by-hop
// headers removed and the chain's headers set. Every refusal is written
// by admit's Responder.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	g := s.current()
	// ctx.Host is the host the request is forwarded with on both branches:
	// the target's for an absolute-form request (RFC 9112 section 3.2.2),
	// else the Host header. ctx.Path is the normalized path, which both
	// branches forward too.
	rt := g.routes.Match(ctx.Host(), ctx.Path())
	if rt == nil {
		s.refuse(ctx, admit.NoRoute())
		return
	}
	if r := s.ipRate.Check(upgrade.ClientIP(ctx), g.retryAfter); r.Refused() {
		s.refuse(ctx, r)
		return
	}
	handshake, r := admit.Shape(ctx, rt)
	if r.Refused() {
		s.refuse(ctx, r)
		return
	}
	if r := admit.Origin(ctx, rt); r.Refused() {
		s.refuse(ctx, r)
		return
	}
	// Limits (max_conns, max_conns_per_ip) were applied when the
	// connection was accepted (edge): its slot is held by the socket
	// from accept to close, whatever the request does; an HTTP/2
	// stream beside its connection's first took one of its own
	// (serveStream).
	authz := admit.Authorizer{
		Plugins: s.plugins, Revoked: s.revocations, TLSInfo: tlsInfo, Log: s.log,
		RetryAfter: g.retryAfter, Timeout: g.handshakeTimeout,
	}
	res, r := authz.Authorize(ctx, rt)
	if r.Refused() {
		s.refuse(ctx, r)
		return
	}
	if upgrade.Gone(ctx) {
		s.refuse(ctx, goneRefusal(ctx))
		return
	}
	if r := admit.PoolAdmission(rt, handshake, g.retryAfter, g.handshakeTimeout); r.Refused() {
		s.refuse(ctx, r)
		return
	}
	if handshake {
		s.serveUpgrade(ctx, g, rt, res)
		return
	}
	s.serveHTTP(ctx, g, rt, res.Headers)
}

// clientGone is the refusal of a request whose HTTP/2 stream failed while
// it was being admitted (upgrade.Gone): nobody reads it, but it is
// counted and logged as any refusal.
var clientGone = admit.Reject(fasthttp.StatusBadRequest, "client_gone", "the request's stream was reset")

// refuse answers ctx with r, counted and logged.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, r admit.Refusal) {
	admit.Responder{Metrics: s.metrics, Access: s.access}.Refuse(ctx, r)
}

// retryLater is a refusal with status and the Retry-After in force.
func (s *Server) retryLater(status int, result, msg string) admit.Refusal {
	return admit.RetryLater(status, result, msg, s.current().retryAfter)
}

// connState is the client server's ConnState hook (see
// upgrade.Switches.ConnState).
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	s.switches.ConnState(c, st)
}

// switchHost is the Server as a handshake's upgrade.Switch reports to it.
type switchHost struct{ s *Server }

// Reserve makes a drain wait for the handshake's tunnel.
func (h switchHost) Reserve() { h.s.tunnels.Reserve() }

// Unreserve ends the wait Reserve began.
func (h switchHost) Unreserve() { h.s.tunnels.Unreserve() }

// Handshake counts a handshake that ended with result.
func (h switchHost) Handshake(result string, start time.Time) { h.s.metrics.Handshake(result, start) }

// StartTunnel starts the tunnel of sw on the client connection c.
func (h switchHost) StartTunnel(c net.Conn, sw *upgrade.Switch) { h.s.startTunnel(c, sw) }

var _ upgrade.Host = switchHost{}

var (
	_ admit.Metrics     = (*telemetry.Metrics)(nil)
	_ admit.AccessLog   = (*telemetry.AccessLog)(nil)
	_ admit.Revocations = (*revoke.Revoker)(nil)
)
