package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/registry"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// maxTries bounds the nodes one handshake tries, whatever the config says,
// so the excluded-node list stays on the stack.
const maxTries = 8

// maxUpstreamAnswer is the largest body of a non-101 answer from a node that
// is passed on to the client (a relay's 400 or 401, say).
const maxUpstreamAnswer = 64 << 10

// errUpstream marks a node that failed the handshake: it could not be
// reached, answered 5xx, or answered a 101 that does not prove it speaks
// WebSocket for this key. The next node is tried.
var errUpstream = errors.New("upstream handshake failed")

// serveUpgrade carries one admitted WebSocket handshake (see handle): a
// node from the route's pool, its 101 relayed to the client, and the
// tunnel.
func (s *Server) serveUpgrade(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, authz pluginhost.Result) {
	var acc [acceptLen]byte // on the stack: it is only compared
	accept := appendAccept(acc[:0], ctx.Request.Header.Peek("Sec-WebSocket-Key"))

	p := rt.Pool
	rb := acquireBuf()
	defer releaseBuf(rb)
	if p.SendProxy {
		*rb = appendProxyHeader(*rb, ctx)
	}
	*rb = s.appendUpstreamRequest(*rb, ctx, g, rt, authz.Headers)
	req := *rb
	hkey := rt.HashKey.Of(ctx) // a hash pool's; nil for the others. ctx's request is unchanged above.
	// One allocation carries what the hand-off needs: the node
	// connection, the 101 for the client and the hijack's state.
	ho := &handoff{s: s, g: g, rt: rt, start: ctx.Time()}
	var excl [maxTries]*balancer.Node
	exclude := excl[:0]
	tries := min(p.Tries, maxTries)
	local := false // a dial failed on the gateway's side
	for try := 0; try < tries; try++ {
		lease, err := p.Balancer.AcquireKey(exclude, hkey)
		if err != nil {
			if try > 0 {
				break // nodes were tried and failed: 502 below
			}
			s.overflow(ctx, g, rt, "no_capacity", "no node with capacity", g.retryAfter)
			return
		}
		answer, err := s.dialNode(p, lease.Node(), req, accept, &ho.up, ho.hdr[:0])
		if err != nil {
			lease.Release()
			exclude = append(exclude, lease.Node())
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
			p.Health.ReportFailure(lease.Node().Addr(), err)
			s.log.Warn("upstream handshake failed", "pool", p.Name, "node", lease.Node().Addr(), "err", err)
			continue
		}
		if answer != nil {
			// The node answered without upgrading (a 4xx of the app's
			// own): the client gets that answer as is.
			lease.Release()
			answer.CopyTo(&ctx.Response)
			s.access.Handshake(ctx, answer.StatusCode(), "upstream_refused")
			fasthttp.ReleaseResponse(answer)
			s.metrics.Handshake("upstream_refused", ctx.Time())
			return
		}
		p.Health.ReportSuccess(lease.Node().Addr())
		var info *registry.Info
		if s.access.On() || !authz.Expires.IsZero() || authz.Subject != "" || authz.CredentialID != "" {
			info = &registry.Info{Expires: authz.Expires, Subject: authz.Subject, Key: authz.CredentialID}
			if s.access.On() { // what only the access log reads: no copies when it is off
				info.Client, info.Path = ctx.RemoteAddr().String(), string(ctx.Path())
				info.Route, info.Start = rt.Name, ctx.Time()
			}
		}
		ho.hd = registry.NewEntry(lease, info)
		ho.run(ctx)
		return
	}
	if local {
		// 503 with Retry-After rather than 502: no node was shown to be
		// bad; the gateway ran short of ports, descriptors or memory,
		// which passes as load falls, so the client is asked to come
		// back later rather than to retry at once.
		s.retryLater(ctx, fasthttp.StatusServiceUnavailable, "local_dial_error", "the gateway is short of local resources to reach a node")
		return
	}
	s.reject(ctx, fasthttp.StatusBadGateway, "upstream_error", "no node completed the websocket handshake")
}

// upgradedConn is a node connection whose 101 has been read.
type upgradedConn struct {
	conn    net.Conn
	pending []byte // bytes the node sent after its 101
	header  []byte // the 101 response for the client
}

var readerPool sync.Pool

// bufPool holds the buffers requests to nodes are rendered in.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf is the largest buffer put back in bufPool: a rare huge
// request does not stay in the pool.
const maxPooledBuf = 16 << 10

func acquireBuf() *[]byte { return bufPool.Get().(*[]byte) }

func releaseBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// dialNode dials n, sends req and reads the node's answer. On a 101 it
// fills up with the upgraded connection, its header for the client
// appended to hdr (see clientResponse); it returns a non-101 answer below
// 500 to pass on, or an error wrapping errUpstream, or one wrapping
// upstream.ErrLocalDial when the dial failed on the gateway's side (which says
// nothing about n).
func (s *Server) dialNode(p *upstream.Pool, n *balancer.Node, req, accept []byte, up *upgradedConn, hdr []byte) (*fasthttp.Response, error) {
	conn, err := p.Dialer.Dial(n.Addr())
	if err != nil {
		if errors.Is(err, upstream.ErrLocalDial) {
			return nil, fmt.Errorf("dial %s: %w", n.Addr(), err)
		}
		return nil, fmt.Errorf("%w: dial: %w", errUpstream, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = conn.Close()
		}
	}()
	_ = conn.SetDeadline(time.Now().Add(p.ConnectTimeout))
	if _, err := conn.Write(req); err != nil {
		return nil, fmt.Errorf("%w: write request: %w", errUpstream, err)
	}
	br, _ := readerPool.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(conn, 4096)
	} else {
		br.Reset(conn)
	}
	defer func() { br.Reset(nil); readerPool.Put(br) }()

	resp := fasthttp.AcquireResponse()
	resp.Header.SetNoDefaultContentType(true)
	if err := resp.Header.Read(br); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("%w: read response: %w", errUpstream, err)
	}
	code := resp.StatusCode()
	switch {
	case code >= 500:
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("%w: node answered %d", errUpstream, code)
	case code != fasthttp.StatusSwitchingProtocols:
		err := resp.ReadBody(br, maxUpstreamAnswer)
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			return nil, fmt.Errorf("%w: read %d answer: %w", errUpstream, code, err)
		}
		return resp, nil
	}
	defer fasthttp.ReleaseResponse(resp)
	if !bytes.EqualFold(resp.Header.Peek("Upgrade"), []byte("websocket")) {
		return nil, fmt.Errorf("%w: 101 without Upgrade: websocket", errUpstream)
	}
	if !bytes.Equal(resp.Header.Peek("Sec-WebSocket-Accept"), accept) {
		return nil, fmt.Errorf("%w: wrong Sec-WebSocket-Accept", errUpstream)
	}
	*up = upgradedConn{conn: conn, header: clientResponse(hdr, &resp.Header)}
	if k := br.Buffered(); k > 0 {
		b, _ := br.Peek(k)
		up.pending = append([]byte(nil), b...)
	}
	_ = conn.SetDeadline(time.Time{})
	ok = true
	return nil, nil
}

// clientResponse appends to b the node's 101 rendered for the client: its
// headers as sent, less the framing headers that do not belong on a 101.
func clientResponse(b []byte, h *fasthttp.ResponseHeader) []byte {
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"...)
	for k, v := range h.All() {
		switch {
		case headerIs(k, "upgrade"), headerIs(k, "connection"), headerIs(k, "content-length"),
			headerIs(k, "content-type"), headerIs(k, "transfer-encoding"):
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// handoff carries a handshake whose node answered 101 from the handler to
// the tunnel: the node connection, the client's 101 (rendered in hdr when
// it fits) and the hijack's state. It lives until the tunnel starts.
type handoff struct {
	s     *Server
	g     *generation
	rt    *route.Route
	start time.Time
	up    upgradedConn
	hd    *registry.Entry
	// claimed is set by whichever of the hijack handler and the timer
	// runs first; the other does nothing.
	claimed atomic.Bool
	timer   *time.Timer
	// late is set when the 101 is written by the hijack handler, after
	// fasthttp has flushed the answers to earlier requests (see run);
	// conn is then the connection as fasthttp's handler saw it, the key
	// under which Server.lateHandoffs holds h until the hijack.
	late bool
	conn net.Conn
	hdr  [320]byte
}

// run sends the client its 101 and hands the connection to the tunnel.
// On a connection's first request the 101 is written here, from the
// handler, the moment the node's was checked, rather than after fasthttp
// has handed over the connection. A later request may have been pipelined
// behind earlier ones whose answers fasthttp still holds in its write
// buffer (it flushes only once it has no further request bytes to read),
// and HTTP/1.1 answers go out in request order: so there the 101 is
// written by the hijack handler, which fasthttp calls after flushing that
// buffer, under a write deadline of handshake_timeout. If fasthttp never
// calls the hijack handler (the client vanished), a timer releases the
// node connection and the hold, so they are released exactly once on
// every path.
func (h *handoff) run(ctx *fasthttp.RequestCtx) {
	s := h.s
	// From here until the tunnel is registered (or the handshake given
	// up) a drain waits for it, so a client that gets its 101 during a
	// drain still gets its 1001.
	s.tunnels.Reserve()
	ctx.HijackSetNoResponse(true)
	if ctx.ConnRequestNum() > 1 {
		h.late, h.conn = true, ctx.Conn()
		// Bounds fasthttp's flush of the earlier answers (its own
		// write_timeout would apply otherwise).
		_ = ctx.SetWriteDeadline(time.Now().Add(h.g.handshakeTimeout))
		// A flush that fails (the client is gone) closes the connection
		// without a hijack: connState then gives the handshake up at
		// once, rather than the timer handshake_timeout later, which
		// would let a client that resets hold node slots for that long
		// each, beyond what max_conns_per_ip counts.
		s.lateHandoffs.Store(h.conn, h)
		h.timer = time.AfterFunc(h.g.handshakeTimeout, h.expire)
		ctx.Hijack(h.hijacked)
		return
	}
	c := ctx.Conn()
	// fasthttp clears the deadline before it hands the connection over.
	_ = c.SetWriteDeadline(time.Now().Add(h.g.handshakeTimeout))
	if _, err := c.Write(h.up.header); err != nil {
		h.clientGone()
		ctx.Hijack(closeConn)
		return
	}
	h.timer = time.AfterFunc(h.g.handshakeTimeout, h.expire)
	ctx.Hijack(h.hijacked)
}

// clientGone gives the handshake up when its 101 could not be written.
func (h *handoff) clientGone() {
	_ = h.up.conn.Close()
	h.hd.Release()
	h.s.metrics.Handshake("client_gone", h.start)
	h.s.tunnels.Unreserve()
}

// closeConn is the hijack handler of a client whose 101 could not be sent.
func closeConn(c net.Conn) { _ = c.Close() }

// expire gives the handshake up when fasthttp has not handed over the
// client connection in time, or has closed it instead (connState).
func (h *handoff) expire() {
	if h.claimed.CompareAndSwap(false, true) {
		h.timer.Stop()
		h.forgetLate()
		_ = h.up.conn.Close()
		h.hd.Release()
		h.s.metrics.Handshake("client_gone", h.start)
		h.s.tunnels.Unreserve()
	}
}

// forgetLate drops a late handoff from Server.lateHandoffs.
func (h *handoff) forgetLate() {
	if h.late {
		h.s.lateHandoffs.CompareAndDelete(h.conn, h)
	}
}

// connState is the client server's ConnState hook: a connection fasthttp
// closes while a late handoff waits for its hijack (the flush of the
// earlier answers failed) gives that handshake up at once.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	if st != fasthttp.StateClosed {
		return
	}
	if v, ok := s.lateHandoffs.Load(c); ok {
		v.(*handoff).expire()
	}
}

// hijacked is the hijack handler: it starts the tunnel on c.
func (h *handoff) hijacked(c net.Conn) {
	if !h.claimed.CompareAndSwap(false, true) {
		_ = c.Close()
		return
	}
	h.timer.Stop()
	h.forgetLate()
	if h.late {
		// fasthttp has flushed every earlier answer and cleared the
		// deadlines.
		_ = c.SetWriteDeadline(time.Now().Add(h.g.handshakeTimeout))
		_, err := c.Write(h.up.header)
		_ = c.SetWriteDeadline(time.Time{})
		if err != nil {
			h.clientGone()
			_ = c.Close()
			return
		}
	}
	h.s.startTunnel(c, h)
	h.s.tunnels.Unreserve()
}

// startTunnel starts the tunnel between the client connection c, whose 101
// has been sent, and the node's.
func (s *Server) startTunnel(c net.Conn, ho *handoff) {
	g, rt, up, hd, start := ho.g, ho.rt, &ho.up, ho.hd, ho.start
	client, pending := detach(c)
	t := tunnel.New(tunnel.Params{
		Client:        client,
		Node:          up.conn,
		ClientPending: pending,
		NodePending:   up.pending,
		MaxFrame:      rt.MaxFrame,
		PingInterval:  rt.PingInterval,
		PongTimeout:   rt.PongTimeout,
		FrameRate:     rt.FrameRate,
		ByteRate:      rt.ByteRate,
		WriteTimeout:  g.cfg.Gateway.WriteTimeout.Duration,
		Lease:         hd,
		OnEnd:         s.onTunnelEnd,
		Engine:        g.engine,
		Counters:      s.tunnels.Counters(),
	})
	s.metrics.Handshake("ok", start)
	s.metrics.StartedOn[t.Engine()].Inc()
	hd.SetTunnel(t)
	e := hd.Info()
	if !e.Expires.IsZero() {
		hd.SetExpiry(time.AfterFunc(time.Until(e.Expires)+g.cfg.Gateway.ExpiryGrace.Duration, func() {
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
			Node: hd.Node().Addr(), Subject: e.Subject, Start: e.Start,
		}, st)
	}
}

// detachBufs holds detach's read buffers.
var detachBufs = sync.Pool{New: func() any { return new([1024]byte) }}

// detach returns the connection under fasthttp's hijacked connection, with
// any bytes the client sent right behind its request (still in fasthttp's
// read buffer). The buffer is read out under an expired deadline, which
// returns buffered bytes and never touches the socket. On the TLS listener
// the connection is the *tls.Conn, never the socket under it: the tunnel
// reads and writes plaintext through it, and the records it has already
// taken off the socket stay in it, to be read there (a read under an
// expired deadline drains what it has decrypted or can decrypt without the
// socket, and its timeout leaves the connection usable).
func detach(c net.Conn) (net.Conn, []byte) {
	u, ok := c.(interface{ UnsafeConn() net.Conn })
	if !ok {
		return c, nil
	}
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return c, nil
	}
	var pending []byte
	buf := detachBufs.Get().(*[1024]byte) // a buffer on the stack would escape through Read
	for range readBufferSize/len(buf) + 2 {
		n, err := c.Read(buf[:])
		pending = append(pending, buf[:n]...)
		if err != nil {
			break
		}
	}
	detachBufs.Put(buf)
	raw := u.UnsafeConn()
	_ = raw.SetReadDeadline(time.Time{})
	return raw, pending
}

// overflow answers a handshake that cannot have a node now (result says
// why: no_capacity, no node has room; admission, the pool's admission
// rate), as the route says: 503 with Retry-After retryAfter, or an
// accepted upgrade closed at once with 1013. A 1013 connection lingers at
// most handshake_timeout, and keeps its connection slot (taken at accept)
// until it is closed, so lingering sockets count against max_conns and
// max_conns_per_ip.
func (s *Server) overflow(ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, result, msg string, retryAfter int) {
	if rt.Overflow != "close-1013" {
		s.retryLaterAfter(ctx, fasthttp.StatusServiceUnavailable, result, msg, retryAfter)
		return
	}
	s.metrics.Handshake(result, ctx.Time())
	s.access.Handshake(ctx, fasthttp.StatusSwitchingProtocols, result)
	accept := acceptKey(ctx.Request.Header.Peek("Sec-WebSocket-Key"))
	timeout := g.handshakeTimeout
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer c.Close()
		b := make([]byte, 0, 160)
		b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
		b = append(b, accept...)
		b = append(b, "\r\n\r\n"...)
		b = wsframe.AppendClose(b, 1013, msg, nil)
		until := time.Now().Add(timeout)
		_ = c.SetDeadline(until)
		if _, err := c.Write(b); err != nil {
			return
		}
		lingerClose(c, until)
	})
}

// lingerClose half-closes c and reads what the peer still sends until it
// closes too, or until the deadline until at the latest, so the close frame
// just written is not lost to a reset. The caller closes c.
func lingerClose(c net.Conn, until time.Time) {
	raw, _ := detach(c)
	// detach cleared the read deadline: a client that never closes must
	// not keep the socket and this goroutine.
	_ = raw.SetDeadline(until)
	if tc, ok := raw.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	var buf [512]byte
	for range 64 {
		if _, err := raw.Read(buf[:]); err != nil {
			return
		}
	}
}

// appendUpstreamRequest appends to b an admitted upgrade request rendered
// for a node: the
// target and Host it was routed by, the client's headers less hop-by-hop
// ones (RFC 9110 section 7.6.1, and any named in Connection) and the
// route's auth_headers, X-Forwarded-For and X-Forwarded-Proto added, and
// the auth chain's headers set (replacing the client's own of the same
// name under any spelling, see sameHeader, so a client cannot forge them;
// an empty value only removes the client's).
func (s *Server) appendUpstreamRequest(b []byte, ctx *fasthttp.RequestCtx, g *generation, rt *route.Route, set map[string]string) []byte {
	h := &ctx.Request.Header
	b = append(b, "GET "...)
	b = append(b, ctx.URI().RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, ctx.Host()...)
	b = append(b, "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"...)
	var canon map[string]string
	if len(set) > 0 {
		canon = make(map[string]string, len(set))
		for k, v := range set {
			canon[http.CanonicalHeaderKey(k)] = v
		}
	}
	conn := h.PeekAll(fasthttp.HeaderConnection)
	for k, v := range h.All() {
		switch {
		case decided(set, k), headerIs(k, "host"), headerIs(k, "x-forwarded-for"), headerIs(k, "x-forwarded-proto"), headerIs(k, "content-length"),
			isHopByHop(k), rt.OwnsHeader(k), connectionListed(conn, k):
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	// PeekAll (in appendForwardedFor) reuses the buffer conn lives in;
	// conn is done with.
	b = append(b, "X-Forwarded-For: "...)
	b = appendForwardedFor(b, ctx, g)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, scheme(ctx)...)
	b = append(b, "\r\n"...)
	for k, v := range canon {
		if v == "" {
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

func scheme(ctx *fasthttp.RequestCtx) string {
	if ctx.IsTLS() {
		return "https"
	}
	return "http"
}

// reject answers a handshake or request with status and a one-line reason.
func (s *Server) reject(ctx *fasthttp.RequestCtx, status int, result, msg string) {
	s.metrics.Handshake(result, ctx.Time())
	s.access.Handshake(ctx, status, result)
	ctx.Error("wsgate: "+msg+"\n", status) // resets the response headers
	ctx.SetConnectionClose()
}

// retryLater rejects with status and a Retry-After header.
func (s *Server) retryLater(ctx *fasthttp.RequestCtx, status int, result, msg string) {
	s.retryLaterAfter(ctx, status, result, msg, s.current().retryAfter)
}

// retryLaterAfter rejects with status and Retry-After: seconds.
func (s *Server) retryLaterAfter(ctx *fasthttp.RequestCtx, status int, result, msg string, seconds int) {
	s.reject(ctx, status, result, msg)
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(seconds))
}

const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// acceptLen is the length of a Sec-WebSocket-Accept value: base64 of a
// SHA-1 sum.
const acceptLen = 28

// acceptKey computes Sec-WebSocket-Accept for key (RFC 6455 section 4.2.2).
func acceptKey(key []byte) string {
	var b [acceptLen]byte
	return string(appendAccept(b[:0], key))
}

// appendAccept appends Sec-WebSocket-Accept for key to dst, allocating
// nothing when dst has room and key is of a valid length.
func appendAccept(dst, key []byte) []byte {
	var in [24 + len(websocketGUID)]byte
	sum := sha1.Sum(append(append(in[:0], key...), websocketGUID...))
	var out [acceptLen]byte
	base64.StdEncoding.Encode(out[:], sum[:])
	return append(dst, out[:]...)
}

// validKey reports whether key is base64 of 16 bytes, as RFC 6455 requires.
func validKey(key []byte) bool {
	if len(key) != 24 {
		return false
	}
	var dst [18]byte
	n, err := base64.StdEncoding.Decode(dst[:], key)
	return err == nil && n == 16
}

// headerIs reports whether the header name k equals name, which must be
// lowercase ASCII, ignoring the case of k.
func headerIs(k []byte, name string) bool {
	return len(k) == len(name) && route.EqualFoldSuffix(k, name)
}
