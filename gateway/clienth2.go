package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admit"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/fastlog"
	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/internal/httpheader"
	"golang.org/x/net/http2"
)

// HTTP/2 from clients (gateway.tls.h2). The TLS listener offers ALPN h2;
// fasthttp's NextProto hands a connection that chose it to serveH2, in
// fasthttp's own serving goroutine, so the connection counts against
// max_conns and max_conns_per_ip from accept and in fasthttp's shutdown as
// an HTTP/1.1 one does, and each stream beside its first takes a slot of
// its own (h2Conn). Each stream is one request, admitted by the same
// handler as an HTTP/1.1 request (handle): serveStream builds it a
// fasthttp.RequestCtx whose connection is the stream (a clientStream),
// and what the handler answers goes back on the stream, unless the
// handshake was accepted and the stream handed to a tunnel
// (upgrade.Switch.Run, admit's close-1013).

// maxStreamBody bounds the body of a plain request over HTTP/2, as
// fasthttp's default MaxRequestBodySize bounds it over HTTP/1.1 on the
// same listener (see streamBody).
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
		// A malformed header block (content-length fields that
		// disagree, say) is reset before any handler runs: it is still
		// the client's bad request.
		Malformed: func(string) { s.metrics.Handshake("bad_request", time.Now()) },
	}
}

// serveH2 serves a TLS connection whose ALPN chose h2 (fasthttp's
// NextProto handler) until it ends. Its errors are the client's (a
// connection that broke the protocol, or went away) and are not logged
// by fasthttp.
func (s *Server) serveH2(c net.Conn) error {
	ip := edge.PlaceOf(c)
	s.h2conns.Store(c, &h2Conn{ip: ip})
	defer s.h2conns.Delete(c)
	err := s.h2.ServeNegotiated(c, s.current().handshakeTimeout)
	if h2serve.CutForFlood(err) {
		// Its address is refused at accept for a while (flood.go).
		s.floods.cut(ip)
	}
	if err != nil && !errors.Is(err, h2serve.ErrServerClosed) {
		s.log.Debug("HTTP/2 connection ended", "client", c.RemoteAddr().String(), "err", err)
	}
	return nil
}

// serveStream is the HTTP/2 server's Handler: one stream, one request,
// through the one admission path. The stream takes its connection's slot
// or one of its own (h2Conn.take) before admission, and holds it until
// its answer is written or, once it is a tunnel, until the tunnel closes
// it.
func (s *Server) serveStream(st *h2serve.Stream) {
	cs := &clientStream{Stream: st}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init2(cs, fastlog.Logger{Log: s.log}, true)
	extended, status, msg := streamRequest(ctx, st.Request())
	if status == 0 && !extended {
		status, msg = streamBody(ctx, st, ctx.Time().Add(s.current().handshakeTimeout))
	}
	if status != 0 {
		s.refuseStream(ctx, cs, admit.Reject(status, "bad_request", msg))
		return
	}
	if hc, ok := s.h2conns.Load(st.Conn()); ok {
		place, status := hc.(*h2Conn).take(s.limits)
		if place == nil {
			s.refuseStream(ctx, cs, s.placeRefusal(status))
			return
		}
		cs.place = place
	}
	s.handle(ctx)
	if !cs.accepted {
		respond(st, &ctx.Response, ctx.IsHead())
		cs.givePlace()
	}
}

// placeRefusal is the answer to a stream that found no slot (see
// h2Conn.take): 429 over max_conns_per_ip, 503 over max_conns, with
// Retry-After.
func (s *Server) placeRefusal(status int) admit.Refusal {
	if status == fasthttp.StatusTooManyRequests {
		return s.retryLater(status, "ip_conns", "too many connections from your address")
	}
	return s.retryLater(fasthttp.StatusServiceUnavailable, "max_conns", "connection limit reached")
}

// h2Conn is a client HTTP/2 connection as max_conns and max_conns_per_ip
// count it. Its slot, taken at accept, covers one stream being admitted,
// forwarded or tunnelled (whichever: a plain request or a WebSocket), as
// an HTTP/1.1 connection carries one request or one tunnel at a time;
// each stream beside it takes a slot of its own (edge.Limiter.Stream),
// gateway-wide and of the address's, held from before its admission
// (plugin calls, the node's handshake, a plain request's body) to its
// end, so that one connection does not multiply either limit by
// h2_max_streams, nor the node sockets and goroutines they bound.
type h2Conn struct {
	ip      netip.Addr
	mu      sync.Mutex
	streams int      // streams admitted or being admitted
	slots   []func() // give back the slots beyond the first: streams-1 of them
}

// take counts one more stream of the connection and returns the function
// that uncounts it (calls after the first do nothing), or nil and the
// status to refuse it with (429, 503) when its slot would take the
// address past max_conns_per_ip or the gateway past max_conns.
func (hc *h2Conn) take(l *edge.Limiter) (func(), int) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.streams > 0 {
		give, status := l.Stream(hc.ip)
		if give == nil {
			return nil, status
		}
		hc.slots = append(hc.slots, give)
	}
	hc.streams++
	var once sync.Once
	return func() { once.Do(hc.drop) }, 0
}

// drop uncounts a stream: a slot beyond the first goes back, whichever
// stream took it.
func (hc *h2Conn) drop() {
	hc.mu.Lock()
	hc.streams--
	var give func()
	if n := len(hc.slots); n > 0 {
		give = hc.slots[n-1]
		hc.slots[n-1] = nil
		hc.slots = hc.slots[:n-1]
	}
	hc.mu.Unlock()
	if give != nil {
		give()
	}
}

// streamRequest writes the stream's request into ctx's as the HTTP/1.1
// request it stands for: :authority as Host, :path as the target, an
// extended CONNECT (RFC 8441) as a GET with Upgrade: its :protocol and
// Connection: Upgrade, cookies joined into one field (RFC 9113 section
// 8.2.3). The protocol is HTTP/2.0. It reports whether the request is
// an extended CONNECT (a plain one's body is for streamBody), or the
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
	if req.NeverIndexed != nil {
		// Kept toward a node over HTTP/2 (see upgrade.NodeStreamRequest).
		ctx.SetUserValue(upgrade.NeverIndexedKey, req.NeverIndexed)
	}
	if extended {
		r.Header.Set("Upgrade", req.Protocol)
		r.Header.Set("Connection", "Upgrade")
	}
	return extended, 0, ""
}

// streamBody makes the stream a plain request's body stream, read only
// once the request is admitted, whole, before a node is taken for it
// (readStreamedBody): a request refused on its route, rate, plain_http or
// authorization leaves its body unread, and one being read holds its
// stream's slot (h2Conn.take), as an HTTP/1.1 request's body being read
// holds its connection's. A body announced larger than maxStreamBody is
// answered 413 at once; one that grows past it is answered 413, one that
// ends off its content-length (RFC 9113 section 8.1.1) 400, one not
// complete by deadline (handshake_timeout from the request's start, as
// fasthttp's ReadTimeout bounds an HTTP/1.1 one) 408. A request whose
// stream ended with its header block has no body stream.
func streamBody(ctx *fasthttp.RequestCtx, st *h2serve.Stream, deadline time.Time) (int, string) {
	want := int64(-1)
	if len(ctx.Request.Header.Peek("Content-Length")) > 0 {
		want = int64(ctx.Request.Header.ContentLength())
		if want > maxStreamBody {
			return fasthttp.StatusRequestEntityTooLarge, "request body too large"
		}
	}
	if _, err := st.TryRead(nil); errors.Is(err, io.EOF) {
		if want > 0 {
			return fasthttp.StatusBadRequest, "content-length differs from the body's length (RFC 9113 section 8.1.1)"
		}
		return 0, "" // no body
	}
	_ = st.SetReadDeadline(deadline)
	ctx.Request.SetBodyStream(&streamedBody{st: st, want: want}, int(want))
	return 0, ""
}

// streamedBody is a request body read off its stream, within
// maxStreamBody and its content-length. It has no Close, so fasthttp's
// reset of the request leaves the stream to its handler.
type streamedBody struct {
	st   *h2serve.Stream
	want int64 // the content-length, -1 when none was given
	n    int64
}

// errBodyTooLarge and errBodyLength end a streamedBody's reads.
var (
	errBodyTooLarge = errors.New("gateway: an HTTP/2 request body larger than the gateway takes")
	errBodyLength   = errors.New("gateway: an HTTP/2 request body off its content-length (RFC 9113 section 8.1.1)")
)

func (b *streamedBody) Read(p []byte) (int, error) {
	n, err := b.st.Read(p)
	b.n += int64(n)
	switch {
	case b.n > maxStreamBody:
		return n, errBodyTooLarge
	case b.want >= 0 && b.n > b.want, errors.Is(err, io.EOF) && b.want >= 0 && b.n != b.want:
		return n, errBodyLength
	}
	return n, err
}

// readStreamedBody reads a plain request's body off its HTTP/2 stream
// whole (see streamBody), once the request is admitted and before a node
// is taken for it, as fasthttp reads an HTTP/1.1 request's before its
// handler runs: a slow body then costs its sender (its stream's slot, up
// to handshake_timeout from the request's start), never one of the
// node's pooled connections, which a stream that dribbles its body would
// otherwise hold for everyone. It returns the refusal for a body that
// grew past maxStreamBody (413), ended off its content-length (400), did
// not end in time (408), or whose stream failed (the client's gone); a
// request without a body stream is left as it is.
func readStreamedBody(ctx *fasthttp.RequestCtx) admit.Refusal {
	if !ctx.Request.IsBodyStream() {
		return admit.Refusal{}
	}
	b, ok := ctx.Request.BodyStream().(*streamedBody)
	if !ok {
		return admit.Refusal{}
	}
	buf := make([]byte, 0, 4096) // grown as the body comes, never by what it announces
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := b.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			ctx.Request.SetBodyRaw(buf) // closes nothing: streamedBody has no Close
			return admit.Refusal{}
		case errors.Is(err, errBodyTooLarge):
			return admit.Reject(fasthttp.StatusRequestEntityTooLarge, "bad_request", "request body too large")
		case errors.Is(err, errBodyLength):
			return admit.Reject(fasthttp.StatusBadRequest, "bad_request", "content-length differs from the body's length (RFC 9113 section 8.1.1)")
		case errors.Is(err, os.ErrDeadlineExceeded):
			return admit.Reject(fasthttp.StatusRequestTimeout, "bad_request", "request body not received in time")
		case isMalformedBody(err):
			return admit.Reject(fasthttp.StatusBadRequest, "bad_request", "request body off its content-length (RFC 9113 section 8.1.1)")
		default:
			return admit.Reject(fasthttp.StatusBadRequest, "client_gone", "the request's stream ended before its body")
		}
	}
}

// goneRefusal is the refusal of a request whose HTTP/2 stream failed while
// it was being admitted: clientGone, unless h2serve reset the stream for
// DATA off its content-length, which is the client's malformed request
// (bad_request, RFC 9113 section 8.1.1).
func goneRefusal(ctx *fasthttp.RequestCtx) admit.Refusal {
	if cs, ok := ctx.Conn().(*clientStream); ok {
		if isMalformedBody(cs.Err()) {
			return admit.Reject(fasthttp.StatusBadRequest, "bad_request", "request body off its content-length (RFC 9113 section 8.1.1)")
		}
	}
	return clientGone
}

// isMalformedBody reports whether err is h2serve's reset of a stream whose
// DATA did not add up to its content-length (PROTOCOL_ERROR, from this
// side): the client's malformed request.
func isMalformedBody(err error) bool {
	var se *h2serve.StreamError
	return errors.As(err, &se) && !se.Remote && se.Code == http2.ErrCodeProtocol
}

// refuseStream answers a stream whose request could not be read, counted
// and logged as any refusal.
func (s *Server) refuseStream(ctx *fasthttp.RequestCtx, cs *clientStream, r admit.Refusal) {
	s.refuse(ctx, r)
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
	// place uncounts the stream from its connection's slots
	// (h2Conn.take); nil when it holds none.
	place func()
}

// givePlace gives back the stream's slot, if it holds one; calls after
// the first do nothing.
func (c *clientStream) givePlace() {
	if c.place != nil {
		c.place()
	}
}

// Close ends the stream, and its tunnel's slot.
func (c *clientStream) Close() error {
	c.givePlace()
	return c.Stream.Close()
}

// Gone reports whether the stream failed (reset by the client, or its
// connection lost) while its request is being admitted (upgrade.Gone).
// A stream whose client only ended its side is not gone.
func (c *clientStream) Gone() bool {
	return c.Err() != nil
}

// Handshake does nothing: the connection's TLS handshake is done.
func (c *clientStream) Handshake() error { return nil }

// ConnectionState is the TLS state of the stream's connection.
func (c *clientStream) ConnectionState() tls.ConnectionState {
	// The edge listener's TLS connection, or a *tls.Conn.
	if tc, ok := c.Conn().(interface{ ConnectionState() tls.ConnectionState }); ok {
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
