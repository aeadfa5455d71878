package gateway

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/httpheader"
	"github.com/wsgate/wsgate/internal/throttle"
)

// proxyTimeout bounds one plain HTTP request to a node.
const proxyTimeout = 30 * time.Second

// prepareForward readies a plain request to go to a node: hop-by-hop
// headers and those Connection names removed, the route's auth_headers
// and the chain's headers removed under any spelling (see
// route.SameHeader), the chain's headers set (an empty value only removes
// the client's), the Host and (normalized) path the request was routed
// by, and X-Forwarded-For, Forwarded and X-Forwarded-Proto.
func prepareForward(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, set map[string]string) {
	h := &ctx.Request.Header
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		for len(v) > 0 {
			var t []byte
			t, v = httpheader.NextToken(v)
			if len(t) > 0 {
				h.DelBytes(t)
			}
		}
	}
	for _, k := range httpheader.HopByHop {
		h.Del(k) // Del takes any case
	}
	var drop [][]byte // deleting while iterating would skip headers
	for k := range h.All() {
		if rt.OwnsHeader(k) || upgrade.Decided(set, k) {
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
	xff := upgrade.AppendForwardedFor(nil, ctx, g.trusted)
	fwd := upgrade.AppendForwarded(nil, ctx, g.trusted)
	h.Del("X-Forwarded-For")
	h.SetBytesV("X-Forwarded-For", xff)
	h.Del("Forwarded")
	h.SetBytesV("Forwarded", fwd)
	h.Del("X-Forwarded-Proto")
	h.Set("X-Forwarded-Proto", upgrade.Scheme(ctx))
	// Nodes are spoken plain HTTP to: a request read on the TLS listener
	// parses as https, which the node's client refuses.
	ctx.Request.URI().SetScheme("http")
	// And HTTP/1.1, whatever the client spoke (an HTTP/2 stream's request
	// says HTTP/2.0, which fasthttp's client would write in its request
	// line).
	h.SetProtocol("HTTP/1.1")
}

// serveHTTP proxies an admitted plain HTTP request to a node of the route's
// pool, so a relay's /info or an app's REST API works through the gateway.
// Idempotent requests move to the next node when one cannot be reached.
// An HTTP/2 stream's body is read whole first (readStreamedBody), as an
// HTTP/1.1 request's was before its handler ran, so a node connection is
// never held waiting for a client's body.
// It stays in the gateway rather than in upstream: it reads the route
// (its hash key, its owned headers) and package route imports upstream.
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, set map[string]string) {
	if r := readStreamedBody(ctx); r.Refused() {
		s.refuse(ctx, r)
		return
	}
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
		if upgrade.Gone(ctx) { // before each pick, and so before the request goes
			ctx.Response.Reset()
			s.refuse(ctx, goneRefusal(ctx))
			return
		}
		lease, err := p.Balancer.AcquireKey(exclude, hkey)
		if err != nil {
			if try == 0 {
				s.refuse(ctx, s.retryLater(fasthttp.StatusServiceUnavailable, "no_capacity", "no node with capacity"))
				return
			}
			break
		}
		if p.SendProxy {
			err = p.DoOwnConn(lease.Node().Addr(), upgrade.ProxyHeaderFor(ctx), req, &ctx.Response, proxyTimeout)
		} else {
			err = p.HTTP[lease.Node()].DoTimeout(req, &ctx.Response, proxyTimeout)
		}
		lease.Release()
		if err == nil {
			return
		}
		s.proxyFailed(p.Name, lease.Node().Addr(), err)
		var nerr net.Error
		if !errors.As(err, &nerr) && !errors.Is(err, fasthttp.ErrConnectionClosed) {
			break
		}
		exclude = append(exclude, lease.Node())
	}
	ctx.Response.Reset()
	s.refuse(ctx, admit.Reject(fasthttp.StatusBadGateway, "upstream_error", "no node answered"))
}

// proxyLogEvery spaces the log lines of plain requests that failed at a
// node: a client can make them fail (a body that breaks off), and one
// line each would let it fill the log.
const proxyLogEvery = time.Second

// proxyErrors throttles the lines of failed plain requests. It is safe
// for concurrent use.
type proxyErrors struct {
	mu    sync.Mutex
	lines throttle.Lines
}

// proxyFailed counts a plain request that failed at node of pool
// (wsgate_proxy_errors_total) and logs it, at most one line a second,
// the line carrying the failures since the one before (the last of a
// burst ride on the next line; the metric has them all).
func (s *Server) proxyFailed(pool, node string, err error) {
	s.metrics.ProxyErrors.WithLabelValues(pool).Inc()
	s.proxyErrs.mu.Lock()
	n, ok := s.proxyErrs.lines.Note(time.Now(), proxyLogEvery)
	s.proxyErrs.mu.Unlock()
	if ok {
		s.log.Warn("proxy request failed", "pool", pool, "node", node, "err", err, "failures", n)
	}
}
