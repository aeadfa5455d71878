package gateway

import (
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
	"github.com/wsgate/wsgate/health"
)

// maxTries bounds the nodes one handshake tries, whatever the config says,
// so the excluded-node list stays on the stack.
const maxTries = 8

// serveUpgrade carries one admitted WebSocket handshake (see handle): a
// node from the route's pool, its 101 relayed to the client, and the
// tunnel. It is the gateway's wiring of package upgrade: which node is
// tried, the node's health, the registry entry, and the refusals a failed
// upgrade ends in (written by admit's Responder).
func (s *Server) serveUpgrade(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, authz pluginhost.Result) {
	if upgrade.StreamOf(ctx) != nil {
		// An extended CONNECT carries no key (RFC 8441 section 5); the
		// node's HTTP/1.1 upgrade gets one of the gateway's.
		ctx.Request.Header.SetBytesV("Sec-WebSocket-Key", upgrade.NewKey())
	}
	var acc [upgrade.AcceptLen]byte // on the stack: it is only compared
	accept := upgrade.AppendAccept(acc[:0], ctx.Request.Header.Peek("Sec-WebSocket-Key"))

	p := rt.Pool
	var (
		req  []byte      // the HTTP/1.1 upgrade request, for an "http1" pool
		sreq *h2.Request // the extended CONNECT, for an "h2" pool
	)
	if p.H2 != nil {
		sreq = upgrade.NodeStreamRequest(ctx, rt, g.trusted, authz.Headers)
	} else {
		rb := upgrade.AcquireRequestBuf()
		defer upgrade.ReleaseRequestBuf(rb)
		if p.SendProxy {
			*rb = upgrade.AppendProxyHeader(*rb, ctx)
		}
		*rb = upgrade.AppendNodeRequest(*rb, ctx, rt, g.trusted, authz.Headers)
		req = *rb
	}
	hkey := rt.HashKey.Of(ctx) // a hash pool's; nil for the others. ctx's request is unchanged above.
	// One allocation carries what the hand-over needs: the node
	// connection, the 101 for the client and the hijack's state.
	sw := s.switches.New(rt, ctx.Time(), g.handshakeTimeout)
	sw.WriteTimeout, sw.ExpiryGrace, sw.Engine = g.cfg.Gateway.WriteTimeout.Duration, g.cfg.Gateway.ExpiryGrace.Duration, g.engine
	// A tunnel between sockets runs on a poller, which then watches the
	// node's socket from its connect on, and so does a TLS 1.3 client's
	// whose records were taken from crypto/tls; any other TLS client's
	// runs on goroutines (see tunnel.Engine).
	polled := sw.Engine == tunnel.EngineAuto && (!ctx.IsTLS() || tunnel.HasRecords(ctx.Conn()))
	var gone func() bool // asked between a node's dial and the request (an HTTP/2 client's stream may be reset meanwhile)
	if upgrade.StreamOf(ctx) != nil {
		gone = func() bool { return upgrade.Gone(ctx) }
	}
	var excl [maxTries]*balancer.Node
	exclude := excl[:0]
	tries := min(p.Tries, maxTries)
	local := false     // a dial failed on the gateway's side
	backedOff := false // a node's h2 set did not dial it: it flooded lately
	failed := false    // a node failed the handshake
	for try := 0; try < tries; try++ {
		if upgrade.Gone(ctx) { // before each pick, and so each dial
			s.refuse(ctx, goneRefusal(ctx))
			return
		}
		lease, err := p.Balancer.AcquireKey(exclude, hkey)
		if err != nil {
			if try > 0 {
				break // nodes were tried and failed: 502 below
			}
			s.refuse(ctx, admit.Overflow(rt, "no_capacity", "no node with capacity", g.retryAfter, g.handshakeTimeout))
			return
		}
		var answer *fasthttp.Response
		if sreq != nil {
			answer, err = s.openStream(p, lease.Node(), sreq, accept, sw, upgrade.Ended(ctx))
		} else {
			answer, err = upgrade.DialNode(p, lease.Node(), req, accept, &sw.Node, sw.Hdr[:0], polled, gone)
		}
		if err != nil {
			lease.Release()
			if errors.Is(err, upgrade.ErrClientGone) {
				s.refuse(ctx, goneRefusal(ctx))
				return
			}
			exclude = append(exclude, lease.Node())
			if errors.Is(err, h2.ErrSetClosed) {
				continue // retired twice: reloads in a row; the next node
			}
			if errors.Is(err, h2.ErrBackoff) {
				// Not dialed: the node's connection was cut for
				// flooding lately (gateway.flood_backoff). Nothing new
				// about its health, nothing to log per client: the
				// next node, or the answer of a pool without one.
				backedOff = true
				continue
			}
			if errors.Is(err, upgrade.ErrStreamRejected) {
				s.refuse(ctx, admit.Reject(fasthttp.StatusBadGateway, "upstream_error", "the node rejected the websocket handshake"))
				return
			}
			if errors.Is(err, h2.ErrRequestTooLarge) {
				s.refuse(ctx, admit.Reject(fasthttp.StatusRequestHeaderFieldsTooLarge, "bad_request", "the request's header fields exceed what the node takes"))
				return
			}
			if errors.Is(err, upstream.ErrLocalDial) {
				// The gateway is short, not the node: its health is
				// left alone (the dialer has counted and logged it).
				// Out of ports toward this node from every source,
				// another node may still be reachable; out of
				// descriptors or memory, none is.
				local = true
				if upstream.PerSource(health.LocalReason(err)) {
					continue
				}
				break
			}
			failed = true
			p.Health.ReportFailure(lease.Node().Addr(), err)
			s.log.Warn("upstream handshake failed", "pool", p.Name, "node", lease.Node().Addr(), "err", err)
			continue
		}
		if answer != nil {
			// The node answered without upgrading (a 4xx of the app's
			// own): the client gets that answer as is.
			lease.Release()
			s.refuse(ctx, admit.Refusal{Result: "upstream_refused", Answer: answer})
			return
		}
		p.Health.ReportSuccess(lease.Node().Addr())
		var info *registry.Info
		if s.access.On() || !authz.Expires.IsZero() || authz.Subject != "" || authz.CredentialID != "" {
			info = &registry.Info{Expires: authz.Expires, Subject: authz.Subject, Key: authz.CredentialID}
			if s.access.On() { // what only the access log reads: no copies when it is off
				info.Client, info.Path = ctx.RemoteAddr().String(), string(ctx.Path())
				info.Route, info.Start = rt.Name, ctx.Time()
				info.H2 = upgrade.StreamOf(ctx) != nil
			}
		}
		sw.Entry = registry.NewEntry(lease, info)
		sw.Run(ctx)
		return
	}
	if local {
		// 503 with Retry-After rather than 502: no node was shown to be
		// bad; the gateway ran short of ports, descriptors or memory,
		// which passes as load falls, so the client is asked to come
		// back later rather than to retry at once.
		s.refuse(ctx, s.retryLater(fasthttp.StatusServiceUnavailable, "local_dial_error", "the gateway is short of local resources to reach a node"))
		return
	}
	if backedOff && !failed {
		// Every node tried was backed off: as for a pool with no node
		// up.
		s.refuse(ctx, admit.Overflow(rt, "no_capacity", "no node with capacity", g.retryAfter, g.handshakeTimeout))
		return
	}
	s.refuse(ctx, admit.Reject(fasthttp.StatusBadGateway, "upstream_error", "no node completed the websocket handshake"))
}

// openStream opens the handshake's stream to n of the "h2" pool p (see
// upgrade.OpenNodeStream). A reload that retired the node's connections
// after this handshake read its generation says nothing about the node:
// the stream is tried once more on the connections of the generation in
// force.
func (s *Server) openStream(p *upstream.Pool, n *balancer.Node, req *h2.Request, accept []byte, sw *upgrade.Switch, gone <-chan struct{}) (*fasthttp.Response, error) {
	answer, err := upgrade.OpenNodeStream(p, n.Addr(), p.H2[n], req, accept, &sw.Node, sw.Hdr[:0], gone)
	if errors.Is(err, h2.ErrSetClosed) {
		if set := s.current().h2Set(p.Name, n); set != nil {
			answer, err = upgrade.OpenNodeStream(p, n.Addr(), set, req, accept, &sw.Node, sw.Hdr[:0], gone)
		}
	}
	return answer, err
}

// startTunnel starts the tunnel between the client connection c, whose 101
// has been sent, and the node's. It stays in the gateway as wiring: it
// registers the tunnel, counts it and checks the revocations.
func (s *Server) startTunnel(c net.Conn, sw *upgrade.Switch) {
	rt, up, hd, start := sw.Route, &sw.Node, sw.Entry, sw.Start
	client, pending := upgrade.Detach(c)
	t := tunnel.New(tunnel.Params{
		Client:        client,
		Node:          up.Conn,
		ClientPending: pending,
		NodePending:   up.Pending,
		MaxFrame:      rt.MaxFrame,
		PingInterval:  rt.PingInterval,
		PongTimeout:   rt.PongTimeout,
		FrameRate:     rt.FrameRate,
		ByteRate:      rt.ByteRate,
		WriteTimeout:  sw.WriteTimeout,
		Lease:         hd,
		OnEnd:         s.onTunnelEnd,
		Engine:        sw.Engine,
		Counters:      s.tunnels.Counters(),
	})
	s.metrics.Handshake("ok", start)
	s.metrics.StartedOn[t.Engine()].Inc()
	hd.SetTunnel(t)
	e := hd.Info()
	if !e.Expires.IsZero() {
		hd.SetExpiry(time.AfterFunc(time.Until(e.Expires)+sw.ExpiryGrace, func() {
			s.metrics.Expiries.Inc()
			t.GoAway(tunnel.CodePolicy, "credential expired")
		}))
	}
	s.tunnels.Add(hd)
	t.Start()
	// A revocation that scanned the registry just before this tunnel was
	// added has already marked its subject or key: close it now.
	if s.revocations.Revoked(e.Subject, e.Key) {
		s.metrics.Revocations.Inc()
		go t.GoAway(tunnel.CodePolicy, "credential revoked")
	}
}

// tunnelEnded retires an ended tunnel, counts its close codes and writes
// its access log line.
func (s *Server) tunnelEnded(t *tunnel.Tunnel) {
	st := t.Stats()
	hd := t.Lease().(*registry.Entry)
	ok := s.tunnels.Remove(hd)
	s.metrics.TunnelEnded(st)
	if ok && s.access.On() { // the line's fields are read only when it is on
		e := hd.Info()
		s.access.Tunnel(telemetry.TunnelLine{
			Client: e.Client, Path: e.Path, Route: e.Route,
			Node: hd.Node().Addr(), Subject: e.Subject, Start: e.Start, H2: e.H2,
		}, st)
	}
}
