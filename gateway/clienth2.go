package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/fastlog"
	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/internal/httpheader"
)

// HTTP/2 from clients (gateway.tls.h2). The TLS listener offers ALPN h2;
// fasthttp's NextProto hands a connection that chose it to serveH2, in
// fasthttp's own serving goroutine, so the connection counts against
// max_conns and max_conns_per_ip from accept and in fasthttp's shutdown as
// an HTTP/1.1 one does. Each stream is one request, admitted by the same
// handler as an HTTP/1.1 request (handle): serveStream builds it a
// fasthttp.RequestCtx whose connection is the stream (a clientStream),
// and what the handler answers goes back on the stream, unless the
// handshake was accepted and the stream handed to a tunnel
// (upgrade.Switch.Run, admit's close-1013).

// maxStreamBody bounds the body of a plain request over HTTP/2, as
// fasthttp's default MaxRequestBodySize bounds it over HTTP/1.1 on the
// same listener; a larger one is answered 413.
const maxStreamBody = fasthttp.DefaultMaxRequestBodySize

// newClientH2 returns the HTTP/2 server of the TLS listener for cfg.
func (s *Server) newClientH2(cfg *conf.Config) *h2serve.Server {
	return &h2serve.Server{
		Handler:              s.serveStream,
		MaxConcurrentStreams: uint32(cfg.Gateway.TLS.H2MaxStreams),
		// The bound fasthttp's read buffer sets on an HTTP/1.1 request's
		// header block, in hpack's measure.
		MaxHeaderListSize: uint32(readBufferSize),
		WriteTimeout:      cfg.Gateway.WriteTimeout.Duration,
		IdleTimeout:       s.http.IdleTimeout,
	}
}

// serveH2 serves a TLS connection whose ALPN chose h2 (fasthttp's
// NextProto handler) until it ends. Its errors are the client's (a
// connection that broke the protocol, or went away) and are not logged
// by fasthttp.
func (s *Server) serveH2(c net.Conn) error {
	err := s.h2.ServeNegotiated(c, s.current().handshakeTimeout)
	if err != nil && !errors.Is(err, h2serve.ErrServerClosed) {
		s.log.Debug("HTTP/2 connection ended", "client", c.RemoteAddr().String(), "err", err)
	}
	return nil
}

// serveStream is the HTTP/2 server's Handler: one stream, one request,
// through the one admission path.
func (s *Server) serveStream(st *h2serve.Stream) {
	cs := &clientStream{Stream: st}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init2(cs, fastlog.Logger{Log: s.log}, true)
	extended, status, msg := streamRequest(ctx, st.Request())
	if status == 0 && !extended {
		status, msg = readStreamBody(ctx, st, ctx.Time().Add(s.current().handshakeTimeout))
	}
	if status != 0 {
		s.refuseStream(ctx, cs, status, msg)
		return
	}
	s.handle(ctx)
	if !cs.accepted {
		respond(st, &ctx.Response, ctx.IsHead())
	}
}

// streamRequest writes the stream's request into ctx's as the HTTP/1.1
// request it stands for: :authority as Host, :path as the target, an
// extended CONNECT (RFC 8441) as a GET with Upgrade: its :protocol and
// Connection: Upgrade, cookies joined into one field (RFC 9113 section
// 8.2.3). The protocol is HTTP/2.0. It reports whether the request is
// an extended CONNECT (a plain one's body is for readStreamBody), or the
// status and reason to refuse the stream with instead.
func streamRequest(ctx *fasthttp.RequestCtx, req *h2serve.Request) (extended bool, status int, msg string) {
	r := &ctx.Request
	extended = req.Method == http.MethodConnect && req.Protocol != ""
	switch {
	case extended:
		r.Header.SetMethod(http.MethodGet)
	case req.Method == http.MethodConnect:
		return false, fasthttp.StatusMethodNotAllowed, "CONNECT without :protocol: the gateway is not a forward proxy"
	default:
		r.Header.SetMethod(req.Method)
	}
	r.Header.SetProtocol("HTTP/2.0")
	r.SetRequestURI(req.Path)
	host := req.Authority
	if host == "" {
		host = req.Header.Get("Host") // allowed in place of :authority (RFC 9113 section 8.3.1)
	}
	if strings.ContainsAny(host, "@ \t") {
		// Malformed (RFC 9113 sections 8.2.1 and 8.3.1): fasthttp
		// would route by what follows an @, and a host has no
		// whitespace (an HTTP/1.1 Host has it trimmed).
		return extended, fasthttp.StatusBadRequest, "user info or whitespace in :authority (RFC 9113 section 8.3.1)"
	}
	r.Header.SetHost(host)
	for k, vs := range req.Header {
		switch {
		case k == "Host":
			continue
		case k == "Connection", k == "Upgrade", k == "Keep-Alive", k == "Proxy-Connection", k == "Transfer-Encoding":
			// Connection-specific: h2serve resets a stream that
			// carries one (RFC 9113 section 8.2.2), and Upgrade and
			// Connection are the extended CONNECT's alone, below.
			continue
		case k == "Cookie":
			r.Header.Set(k, strings.Join(vs, "; "))
			continue
		}
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	if extended {
		r.Header.Set("Upgrade", req.Protocol)
		r.Header.Set("Connection", "Upgrade")
	}
	return extended, 0, ""
}

// readStreamBody reads a plain request's body off the stream, within
// maxStreamBody and before deadline (handshake_timeout from the
// request's start, as fasthttp's ReadTimeout bounds an HTTP/1.1 one).
func readStreamBody(ctx *fasthttp.RequestCtx, st *h2serve.Stream, deadline time.Time) (int, string) {
	_ = st.SetReadDeadline(deadline)
	defer st.SetReadDeadline(time.Time{})
	var body bytes.Buffer
	n, err := body.ReadFrom(io.LimitReader(st, maxStreamBody+1))
	switch {
	case err != nil:
		return fasthttp.StatusBadRequest, "the request's body did not arrive"
	case n > maxStreamBody:
		return fasthttp.StatusRequestEntityTooLarge, "request body too large"
	}
	if cl := ctx.Request.Header.ContentLength(); cl >= 0 && int64(cl) != n && len(ctx.Request.Header.Peek("Content-Length")) > 0 {
		return fasthttp.StatusBadRequest, "content-length differs from the body's length (RFC 9113 section 8.1.1)"
	}
	if n > 0 {
		ctx.Request.SetBody(body.Bytes())
	}
	return 0, ""
}

// refuseStream answers a stream whose request could not be read, counted
// and logged as any refusal.
func (s *Server) refuseStream(ctx *fasthttp.RequestCtx, cs *clientStream, status int, msg string) {
	s.refuse(ctx, admit.Reject(status, "bad_request", msg))
	respond(cs.Stream, &ctx.Response, false)
}

// respond sends resp on the stream: its status, its fields less
// connection-specific ones (RFC 9113 section 8.2.2) and its body; a HEAD
// request's answer keeps the node's Content-Length and sends no body.
func respond(st *h2serve.Stream, resp *fasthttp.Response, head bool) {
	h := http.Header{}
	for k, v := range resp.Header.All() {
		if httpheader.IsHopByHop(k) || httpheader.Is(k, "connection") || httpheader.Is(k, "content-length") {
			continue
		}
		key := textproto.CanonicalMIMEHeaderKey(string(k))
		h[key] = append(h[key], string(v))
	}
	body := resp.Body()
	if head {
		if cl := resp.Header.ContentLength(); cl >= 0 {
			h.Set("Content-Length", strconv.Itoa(cl))
		}
		_ = st.WriteHeader(resp.StatusCode(), h)
		return // runHandler's Close ends the stream
	}
	_ = st.Respond(resp.StatusCode(), h, body)
}

// clientStream is an HTTP/2 stream as the connection of the RequestCtx
// built for its request: fasthttp and admission read its TLS state
// (IsTLS, TLSConnectionState), addresses and protocol from it, and
// upgrade.StreamOf finds it to answer a handshake with 200 rather than a
// 101 (upgrade.ClientStream). It is used by the stream's handler goroutine
// until Accept, then by the tunnel.
type clientStream struct {
	*h2serve.Stream
	accepted bool // Accept ran: the stream is the tunnel's
}

// Handshake does nothing: the connection's TLS handshake is done.
func (c *clientStream) Handshake() error { return nil }

// ConnectionState is the TLS state of the stream's connection.
func (c *clientStream) ConnectionState() tls.ConnectionState {
	if tc, ok := c.Conn().(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}

// Accept answers the extended CONNECT with 200 and the fields of the
// node's 101 head (see upgrade.ClientStream), and detaches the stream
// from its handler: the tunnel closes it.
func (c *clientStream) Accept(head []byte) error {
	h := http.Header{}
	if len(head) > 0 {
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
		if _, err := tp.ReadLine(); err != nil { // the status line
			return err
		}
		mh, err := tp.ReadMIMEHeader()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for k, v := range mh {
			switch k {
			case "Upgrade", "Connection", "Sec-Websocket-Accept", "Content-Length":
				continue
			}
			h[k] = v
		}
	}
	if err := c.WriteHeader(fasthttp.StatusOK, h); err != nil {
		return err
	}
	c.accepted = true
	c.Detach(nil)
	return nil
}

// registerH2Metrics adds the HTTP/2 client connections and streams to the
// metrics /metrics serves.
func (s *Server) registerH2Metrics() {
	stats := func() h2serve.Stats { return s.h2.Stats() }
	s.metrics.Reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_client_h2_connections",
			Help: "Client connections served HTTP/2 (TLS with ALPN h2), open now; each also counts once in wsgate_client_connections.",
		}, func() float64 { return float64(stats().Conns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_client_h2_streams",
			Help: "Streams of client HTTP/2 connections open now: WebSocket tunnels (each also a live tunnel) and requests.",
		}, func() float64 { return float64(stats().Streams) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "wsgate_client_h2_streams_total",
			Help: "Streams client HTTP/2 connections opened, each a request admitted as an HTTP/1.1 one is.",
		}, func() float64 { return float64(stats().Opened) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "wsgate_client_h2_refused_streams_total",
			Help: "Client HTTP/2 streams refused with REFUSED_STREAM: over gateway.tls.h2_max_streams (open or still being admitted), or after GOAWAY.",
		}, func() float64 { return float64(stats().Refused) }),
	)
}

var _ upgrade.ClientStream = (*clientStream)(nil)
