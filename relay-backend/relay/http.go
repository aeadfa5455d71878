package relay

import (
	_ "embed"
	"encoding/json"
	"strings"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
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
		if r.draining.Load() {
			ctx.Error("draining", fasthttp.StatusServiceUnavailable)
			return
		}
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("ok")
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

func (r *Relay) upgrade(ctx *fasthttp.RequestCtx, roomID string) {
	if !ValidRoom(roomID) {
		ctx.Error("bad room id", fasthttp.StatusBadRequest)
		return
	}
	if r.draining.Load() {
		ctx.Response.Header.Set("Retry-After", "1")
		ctx.Error("draining", fasthttp.StatusServiceUnavailable)
		return
	}
	hello := string(ctx.QueryArgs().Peek("hello")) == "1"
	// roomID was copied out of the request by string(ctx.Path()); nothing
	// from ctx is used once the handler returns.
	err := r.up.Upgrade(ctx, func(c *websocket.Conn) { r.serveConn(c, roomID, hello) })
	if err != nil {
		r.log.Debug("upgrade refused", "room", roomID, "err", err)
	}
}
