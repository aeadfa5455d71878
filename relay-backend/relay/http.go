package relay

import (
	_ "embed"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

//go:embed page.html
var demoPage []byte

// Handler returns the relay's HTTP handler, for embedding in another
// fasthttp.Server instead of calling Serve. That server must set
// KeepHijackedConns: without it fasthttp ignores Close on an upgraded
// connection, so slow consumers and drain stragglers could not be cut.
func (r *Relay) Handler() fasthttp.RequestHandler { return r.handle }

func (r *Relay) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Error("method not allowed", fasthttp.StatusMethodNotAllowed)
		return
	}
	switch {
	case path == "/healthz":
		r.health(ctx)
	case path == "/info":
		b, _ := json.Marshal(r.Info())
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
	case path == "/":
		ctx.SetContentType("text/html; charset=utf-8")
		ctx.SetBody(r.page)
	case strings.HasPrefix(path, r.opt.RoomPrefix):
		r.upgrade(ctx, path[len(r.opt.RoomPrefix):])
	default:
		ctx.Error("not found", fasthttp.StatusNotFound)
	}
}

// AgentHeader is the response header of GET /healthz that tells the
// gateway's health checker the relay's state and load: "up, load=N" (plus
// ", weight=W" when Options.Weight is set), or "drain, load=N" while
// draining or while the bus cannot reach Redis; N is the number of open
// client connections.
const AgentHeader = "Wsgate-Agent"

// health answers GET /healthz: 200 "ok", or 503 "draining" or "bus
// unavailable", with the agent header.
func (r *Relay) health(ctx *fasthttp.RequestCtx) {
	r.mu.Lock()
	load := len(r.members)
	r.mu.Unlock()
	state, status, body := "up", fasthttp.StatusOK, "ok"
	switch {
	case r.draining.Load():
		state, status, body = "drain", fasthttp.StatusServiceUnavailable, "draining"
	case r.busDown.Load():
		state, status, body = "drain", fasthttp.StatusServiceUnavailable, "bus unavailable"
	}
	v := make([]byte, 0, 40)
	v = append(v, state...)
	v = append(v, ", load="...)
	v = strconv.AppendInt(v, int64(load), 10)
	if r.opt.Weight > 0 && status == fasthttp.StatusOK {
		v = append(v, ", weight="...)
		v = strconv.AppendInt(v, int64(r.opt.Weight), 10)
	}
	ctx.Response.Header.SetBytesV(AgentHeader, v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(body)
}

// offersV1 reports whether a Sec-WebSocket-Protocol header value lists
// relay.v1.
func offersV1(h []byte) bool {
	for tok := range strings.SplitSeq(string(h), ",") {
		if strings.TrimSpace(tok) == relayclient.Subprotocol {
			return true
		}
	}
	return false
}

func (r *Relay) upgrade(ctx *fasthttp.RequestCtx, roomID string) {
	j, no := r.checkJoin(roomID, ctx.Request.Header.Peek("Sec-WebSocket-Protocol"), ctx.QueryArgs())
	if no != nil {
		ctx.Error(no.body, no.status) // resets the response's headers: first
		if no.retryAfter != "" {
			ctx.Response.Header.Set("Retry-After", no.retryAfter)
		}
		return
	}
	// j holds copies (roomID was copied out of the request by
	// string(ctx.Path()), since by ParseSince); nothing from ctx is used
	// once the handler returns.
	err := r.up.Upgrade(ctx, func(c *websocket.Conn) { r.serveConn(c, j.room, j.hello, j.since) })
	if err != nil {
		r.log.Debug("upgrade refused", "room", j.room, "err", err)
	}
}

// join is what an accepted upgrade asks for, copied out of its request.
type join struct {
	room  string
	since relayclient.Since // where a relay.v1 client resumes (zero: none)
	hello bool              // ?hello=1: a hello frame first
}

// refusal is the HTTP answer to an upgrade the relay turns down.
type refusal struct {
	status     int
	body       string
	retryAfter string // Retry-After, in seconds ("" for none)
}

// checkJoin decides, before the WebSocket handshake, whether a client may
// join roomID: the one admission check for upgrades over HTTP/1.1 and over
// HTTP/2. protocols is the request's Sec-WebSocket-Protocol, args its
// query. The room id must be valid, since needs relay.v1 and must parse,
// and a draining relay, a bus that cannot reach its server and a full room
// refuse with 503 and Retry-After.
func (r *Relay) checkJoin(roomID string, protocols []byte, args *fasthttp.Args) (join, *refusal) {
	if !ValidRoom(roomID) {
		return join{}, &refusal{status: fasthttp.StatusBadRequest, body: "bad room id"}
	}
	j := join{room: roomID}
	if args.Has("since") {
		if !offersV1(protocols) {
			return join{}, &refusal{status: fasthttp.StatusBadRequest, body: "since needs the relay.v1 subprotocol"}
		}
		s, err := relayclient.ParseSince(string(args.Peek("since")))
		if err != nil {
			return join{}, &refusal{status: fasthttp.StatusBadRequest, body: "bad since: want <epoch>.<offset>"}
		}
		j.since = s
	}
	switch {
	case r.draining.Load():
		return join{}, &refusal{status: fasthttp.StatusServiceUnavailable, body: "draining", retryAfter: "1"}
	case r.busDown.Load():
		return join{}, &refusal{status: fasthttp.StatusServiceUnavailable, body: "bus unavailable", retryAfter: "5"}
	case r.roomFull(roomID):
		return join{}, &refusal{status: fasthttp.StatusServiceUnavailable, body: "room full", retryAfter: "1"}
	}
	j.hello = string(args.Peek("hello")) == "1"
	return j, nil
}

// roomFull reports whether roomID has MaxMembers members here. Joins racing
// past this check are refused after the upgrade with close 1013.
func (r *Relay) roomFull(roomID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rm := r.rooms[roomID]
	return rm != nil && rm.count >= r.opt.MaxMembers
}
