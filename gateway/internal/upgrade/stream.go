package upgrade

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/route"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
	"golang.org/x/net/http2"
)

// ErrStreamRejected marks a handshake whose stream the node reset: it
// rejected this request, and is no less healthy for it. The client gets
// 502, and no other node is tried with the same request.
var ErrStreamRejected = errors.New("the node reset the stream")

// NodeStreamRequest is an admitted upgrade request as an extended CONNECT
// for a node reached over HTTP/2 (pools.protocol = "h2", RFC 8441 section
// 4): :authority and :path are the Host and target it was routed by, and
// its fields are those AppendNodeRequest sends, less what extended
// CONNECT replaces (Upgrade, Connection, Sec-WebSocket-Key: package h2
// leaves them out).
func NodeStreamRequest(ctx *fasthttp.RequestCtx, rt *route.Route, trusted []netip.Prefix, set map[string]string) *h2.Request {
	h := &ctx.Request.Header
	fields := make(http.Header, 8)
	conn := h.PeekAll(fasthttp.HeaderConnection)
	for k, v := range h.All() {
		if forwarded(k, conn, rt, set) {
			name := string(k)
			fields[name] = append(fields[name], string(v))
		}
	}
	// PeekAll (in AppendForwardedFor) reuses the buffer conn lives in;
	// conn is done with.
	fields["X-Forwarded-For"] = []string{string(AppendForwardedFor(nil, ctx, trusted))}
	fields["Forwarded"] = []string{string(AppendForwarded(nil, ctx, trusted))}
	fields["X-Forwarded-Proto"] = []string{Scheme(ctx)}
	for k, v := range set {
		if v != "" {
			fields[http.CanonicalHeaderKey(k)] = []string{v}
		}
	}
	ni, _ := ctx.UserValue(NeverIndexedKey).(map[string]bool)
	return &h2.Request{Authority: string(ctx.Host()), Path: string(ctx.URI().RequestURI()), Header: fields, NeverIndexed: ni}
}

// NeverIndexedKey is the request's user value (a map[string]bool) that
// names the fields a client over HTTP/2 sent as never-indexed literals
// (h2serve.Request.NeverIndexed): NodeStreamRequest keeps the flag
// toward a node over HTTP/2 (RFC 7541 section 7.1.3).
const NeverIndexedKey = "wsgate.never_indexed"

// OpenNodeStream opens req on set, the HTTP/2 connections to node addr of
// pool p, within p's connect_timeout, and reads the node's answer, as
// DialNode does over HTTP/1.1: a 2xx fills up with the stream and the
// client's 101 (its Sec-WebSocket-Accept from the client's key, accept,
// and the fields the node chose) appended to hdr; an answer from 300 to
// 499 is returned to pass on; a 5xx, a refused stream or a connection
// that failed is an error wrapping ErrUpstream; a stream the node reset
// ErrStreamRejected; a request larger than the node takes
// h2.ErrRequestTooLarge; a dial that failed on the
// gateway's side wraps upstream.ErrLocalDial, and a set closed by a
// reload h2.ErrSetClosed (neither says anything about the node).
//
// gone, when not nil, closes when the client's stream ends (see Ended):
// the open then gives up at once, whether it waits for a connection or
// for the node's answer (its stream to the node is closed, see
// h2.Conn.OpenWebSocket), and returns ErrClientGone.
func OpenNodeStream(p *upstream.Pool, addr string, set *h2.Set, req *h2.Request, accept []byte, up *NodeConn, hdr []byte, gone <-chan struct{}) (*fasthttp.Response, error) {
	if set == nil {
		// Not one of the generation's nodes' (the node left between the
		// lease and now): as a set a reload retired.
		return nil, fmt.Errorf("open a stream to %s: %w", addr, h2.ErrSetClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.ConnectTimeout)
	defer cancel()
	if gone != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-gone:
				cancel()
			case <-stop:
			}
		}()
	}
	st, resp, err := set.Open(ctx, req)
	var se *h2.StreamError
	switch {
	case err != nil && closed(gone):
		return nil, fmt.Errorf("open a stream to %s: %w", addr, ErrClientGone)
	case errors.Is(err, upstream.ErrLocalDial), errors.Is(err, h2.ErrSetClosed), errors.Is(err, h2.ErrRequestTooLarge):
		return nil, fmt.Errorf("open a stream to %s: %w", addr, err)
	case errors.As(err, &se) && se.Remote && se.Code != http2.ErrCodeRefusedStream:
		// The node reset this one stream: it took the request for a
		// bad one, which says nothing of its health. (REFUSED_STREAM,
		// which Set.Open retried, says the node takes no more: the
		// next node is tried, as after a 5xx.)
		return nil, fmt.Errorf("%w: %w", ErrStreamRejected, err)
	case err != nil:
		return nil, fmt.Errorf("%w: open a stream: %w", ErrUpstream, err)
	case resp.Status >= 500:
		return nil, fmt.Errorf("%w: node answered %d", ErrUpstream, resp.Status)
	case st == nil:
		return nodeAnswer(resp), nil
	}
	*up = NodeConn{Conn: st, Header: streamResponse(hdr, accept, resp.Header)}
	return nil, nil
}

// closed reports whether ch, when not nil, is closed.
func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// nodeAnswer is a node's answer to an extended CONNECT that did not open
// the WebSocket (3xx, 4xx), as the client's answer.
func nodeAnswer(r *h2.Response) *fasthttp.Response {
	resp := fasthttp.AcquireResponse()
	resp.Header.SetNoDefaultContentType(true)
	resp.SetStatusCode(r.Status)
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") {
			continue
		}
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
	resp.SetBody(r.Body)
	return resp
}

// streamResponse appends to b the client's 101 for a node's 2xx to an
// extended CONNECT: Sec-WebSocket-Accept for the client's key, and the
// node's fields (Sec-WebSocket-Protocol and Sec-WebSocket-Extensions as
// it chose them, cookies it set, its own), less the framing ones that do
// not belong on a 101.
func streamResponse(b, accept []byte, h http.Header) []byte {
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	b = append(b, accept...)
	b = append(b, "\r\n"...)
	for k, vs := range h {
		switch strings.ToLower(k) {
		case "upgrade", "connection", "content-length", "content-type", "transfer-encoding", "sec-websocket-accept":
			continue
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				continue // hpack allows no CR or LF either; never split a line
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}
