package admit

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// Refusal is how a request's admission (or its upgrade, or its plain
// forward) ends without a node's answer: what the Responder writes. The
// zero Refusal refuses nothing (see Refused).
type Refusal struct {
	Status int    // the HTTP status
	Result string // the handshake metric's result label and the access log's reason
	Msg    string // the one-line reason, in the body after "wsgate: "

	// Retry adds Retry-After: RetryAfter (seconds).
	Retry      bool
	RetryAfter int

	// Header, when set, is one header the answer carries, to Value
	// (Upgrade: websocket on a 426, say).
	Header, Value string

	// Deny sets an auth deny's headers: DenyHeaders (the plugin's), and a
	// default WWW-Authenticate on a 401 without a challenge.
	Deny        bool
	DenyHeaders map[string]string

	// Close answers a handshake with an accepted upgrade closed at once
	// with 1013 and Msg, the socket lingering at most Linger (a route's
	// close-1013 overflow); Status is then unused.
	Close  bool
	Linger time.Duration

	// Answer, when set, is a node's own answer to pass on as is (with
	// Result upstream_refused); the Responder releases it.
	Answer *fasthttp.Response
}

// Refused reports whether r refuses the request.
func (r *Refusal) Refused() bool { return r.Status != 0 || r.Close || r.Answer != nil }

// Reject is a refusal with status and a one-line reason.
func Reject(status int, result, msg string) Refusal {
	return Refusal{Status: status, Result: result, Msg: msg}
}

// RetryLater is a refusal with status and Retry-After: seconds.
func RetryLater(status int, result, msg string, seconds int) Refusal {
	return Refusal{Status: status, Result: result, Msg: msg, Retry: true, RetryAfter: seconds}
}

// Overflow is the refusal of a handshake that cannot have a node now
// (result says why: no_capacity, no node has room; admission, the pool's
// admission rate), as the route says: 503 with Retry-After retryAfter, or
// an accepted upgrade closed at once with 1013. A 1013 connection lingers
// at most handshakeTimeout, and keeps its connection slot (taken at
// accept) until it is closed, so lingering sockets count against
// max_conns and max_conns_per_ip.
func Overflow(rt *route.Route, result, msg string, retryAfter int, handshakeTimeout time.Duration) Refusal {
	if rt.Overflow != "close-1013" {
		return RetryLater(fasthttp.StatusServiceUnavailable, result, msg, retryAfter)
	}
	return Refusal{Result: result, Msg: msg, Close: true, Linger: handshakeTimeout}
}

// Metrics counts handshakes by result.
type Metrics interface {
	Handshake(result string, start time.Time)
}

// AccessLog writes a handshake's (or request's) access log line.
type AccessLog interface {
	Handshake(ctx *fasthttp.RequestCtx, status int, reason string)
}

// Responder writes refusals: every refusal on the request path is
// answered by its Refuse, so each carries its metric and its access log
// line. It is safe for concurrent use.
type Responder struct {
	Metrics Metrics
	Access  AccessLog
}

// Refuse answers ctx with r.
func (w Responder) Refuse(ctx *fasthttp.RequestCtx, r Refusal) {
	switch {
	case r.Answer != nil:
		r.Answer.CopyTo(&ctx.Response)
		w.Access.Handshake(ctx, r.Answer.StatusCode(), r.Result)
		fasthttp.ReleaseResponse(r.Answer)
		w.Metrics.Handshake(r.Result, ctx.Time())
		return
	case r.Close:
		w.close1013(ctx, r.Result, r.Msg, r.Linger)
		return
	}
	w.Metrics.Handshake(r.Result, ctx.Time())
	w.Access.Handshake(ctx, r.Status, r.Result)
	ctx.Error("wsgate: "+r.Msg+"\n", r.Status) // resets the response headers
	ctx.SetConnectionClose()
	if r.Retry {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	if r.Header != "" {
		ctx.Response.Header.Set(r.Header, r.Value)
	}
	if r.Deny {
		setDenyHeaders(ctx, r.Status, r.DenyHeaders)
	}
}

// close1013 answers a handshake with an accepted upgrade closed at once
// with 1013 and msg (see Overflow).
func (w Responder) close1013(ctx *fasthttp.RequestCtx, result, msg string, timeout time.Duration) {
	w.Metrics.Handshake(result, ctx.Time())
	if st := upgrade.StreamOf(ctx); st != nil {
		// An HTTP/2 stream: accepted with 200, then the close frame.
		w.Access.Handshake(ctx, fasthttp.StatusOK, result)
		defer st.Close() // after the close frame: END_STREAM
		if st.Accept(nil) == nil {
			_ = st.SetWriteDeadline(time.Now().Add(timeout))
			_, _ = st.Write(wsframe.AppendClose(nil, 1013, msg, nil))
		}
		return
	}
	w.Access.Handshake(ctx, fasthttp.StatusSwitchingProtocols, result)
	accept := upgrade.AcceptKey(ctx.Request.Header.Peek("Sec-WebSocket-Key"))
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
		upgrade.LingerClose(c, until)
	})
}

// DefaultChallenge is the WWW-Authenticate of a 401 whose plugin set
// none: a 401 must carry one (RFC 9110, section 15.5.2).
const DefaultChallenge = `Bearer realm="wsgate"`

// setDenyHeaders sets a deny answer's headers: the plugin's (checked by
// pluginhost: names a deny may set, no control characters), and on
// a 401 without a challenge, DefaultChallenge. It runs after the error
// body is set, which resets the response headers.
func setDenyHeaders(ctx *fasthttp.RequestCtx, status int, headers map[string]string) {
	challenged := false
	for k, v := range headers {
		ctx.Response.Header.Set(k, v)
		challenged = challenged || strings.EqualFold(k, "WWW-Authenticate")
	}
	if status == fasthttp.StatusUnauthorized && !challenged {
		ctx.Response.Header.Set("WWW-Authenticate", DefaultChallenge)
	}
}
