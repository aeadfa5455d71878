package relay

import (
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

// serveStream serves one request stream of an HTTP/2 connection (a
// gateway multiplexing its clients, RFC 8441). An extended CONNECT with
// :protocol websocket on a room path is a join, checked by checkJoin as an
// HTTP/1.1 upgrade is: accepted, it is answered 200 and its member
// behaves exactly as one that came over HTTP/1.1, though it is served
// from the stream's callbacks rather than goroutines of its own (see
// h2Member), so this goroutine returns; refused, it gets the same
// status, body and Retry-After. Any other request is answered 405 (HTTP/2 carries only WebSockets here; /healthz,
// /info and the demo page are served over HTTP/1.1), an extended CONNECT
// for another protocol 501, and one on any other path 404.
func (r *Relay) serveStream(s *h2serve.Stream) {
	req := s.Request()
	switch {
	case req.Method != http.MethodConnect || req.Protocol == "":
		refuseStream(s, &refusal{status: fasthttp.StatusMethodNotAllowed, body: "method not allowed: HTTP/2 serves WebSockets (extended CONNECT) only"})
		return
	case req.Protocol != "websocket":
		refuseStream(s, &refusal{status: fasthttp.StatusNotImplemented, body: "protocol not supported"})
		return
	}
	// Parsed as fasthttp parses an HTTP/1.1 request target, so that a room
	// path and its query mean the same whichever way they came.
	var u fasthttp.URI
	if err := u.Parse(nil, []byte(req.Path)); err != nil {
		refuseStream(s, &refusal{status: fasthttp.StatusBadRequest, body: "bad path"})
		return
	}
	path := string(u.Path())
	roomID, ok := strings.CutPrefix(path, r.opt.RoomPrefix)
	if !ok {
		refuseStream(s, &refusal{status: fasthttp.StatusNotFound, body: "not found"})
		return
	}
	j, no := r.checkJoin(roomID, []byte(req.Header.Get("Sec-WebSocket-Protocol")), u.QueryArgs())
	if no != nil {
		refuseStream(s, no)
		return
	}
	c, err := h2serve.UpgradeWebSocket(s, r.h2up)
	if err != nil {
		r.log.Debug("upgrade refused", "room", j.room, "err", err, "proto", "h2")
		return
	}
	// The Upgrader made the same checks and subprotocol choice as over
	// HTTP/1.1 and answered the stream; its connection is dropped, and the
	// member is served from the stream itself, with no goroutine while it
	// is idle.
	r.serveH2(s, j.room, c.Subprotocol() == relayclient.Subprotocol, j.hello, j.since)
}

// refuseStream answers s with no, as fasthttp's ctx.Error answers an
// HTTP/1.1 request.
func refuseStream(s *h2serve.Stream, no *refusal) {
	h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	if no.retryAfter != "" {
		h.Set("Retry-After", no.retryAfter)
	}
	_ = s.Respond(no.status, h, []byte(no.body))
}
