package telemetry

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/internal/throttle"
)

// RefusalLogEvery spaces the access log's refusal lines: at most ten a
// second, so a flood of refused handshakes or connections costs ten lines
// a second, each with the count of refusals left out since the line before.
const RefusalLogEvery = 100 * time.Millisecond

// AccessLog writes the access log, when [log] access is on: one line per
// tunnel at its end and one per refused handshake or connection, the
// latter sampled (see RefusalLogEvery). A line carries no header value and
// no query string, where credentials ride. It is safe for concurrent use;
// it must not be copied.
type AccessLog struct {
	log *slog.Logger
	on  func() bool // [log] access of the running config

	mu       sync.Mutex
	refusals throttle.Lines
	lastSeen time.Time   // the latest refusal
	timer    *time.Timer // writes the count of refusals left out once a flood stops
}

// NewAccessLog returns the access log written to log while on reports
// [log] access of the running config on.
func NewAccessLog(log *slog.Logger, on func() bool) *AccessLog {
	return &AccessLog{log: log, on: on}
}

// On reports whether the access log is on, so that a handshake records
// what only the access log reads (a TunnelLine's fields) only then.
func (a *AccessLog) On() bool { return a.on() }

// TunnelLine is what the line of a tunnel that ended says beside its
// Stats: what the gateway recorded of the tunnel at its handshake. A
// tunnel that began while the access log was off has no client, path,
// route or start recorded.
type TunnelLine struct {
	Client  string    // the client's address
	Path    string    // the request's path, without query string
	Route   string    // the route's name
	Node    string    // the address of the node the tunnel ran to
	Subject string    // the credential's subject (empty: none)
	Start   time.Time // when the handshake arrived (zero: not recorded)
	// H2 says the client's WebSocket was a stream of an HTTP/2
	// connection (RFC 8441), answered 200: the line's proto is HTTP/2.0
	// rather than HTTP/1.1, its status 200 rather than 101.
	H2 bool
}

// Tunnel writes the line of a tunnel that ended, from what its handshake
// recorded. A tunnel that began while the access log was off has no
// client, path, route or start recorded: its line leaves them empty and
// has no duration_ms.
func (a *AccessLog) Tunnel(e TunnelLine, st tunnel.Stats) {
	if !a.on() {
		return
	}
	code := uint16(0)
	switch st.FirstClose {
	case tunnel.ByClient:
		code = st.ClientCloseCode
	case tunnel.ByNode:
		code = st.NodeCloseCode
	case tunnel.ByGateway:
		code = max(st.GatewayToClientCode, st.GatewayToNodeCode)
	}
	proto, status := "HTTP/1.1", fasthttp.StatusSwitchingProtocols
	if e.H2 {
		proto, status = "HTTP/2.0", fasthttp.StatusOK
	}
	args := []any{
		"kind", "tunnel",
		"client", e.Client,
		"path", e.Path,
		"route", e.Route,
		"node", e.Node,
		"proto", proto,
		"status", status,
		"close_code", code,
		"close_by", st.FirstClose.String(),
		"end", st.End.String(),
	}
	if !e.Start.IsZero() {
		args = append(args, "duration_ms", float64(time.Since(e.Start).Microseconds())/1000)
	}
	args = append(args,
		"frames_in", st.FramesToNode,
		"bytes_in", st.BytesToNode,
		"frames_out", st.FramesToClient,
		"bytes_out", st.BytesToClient,
		"subject", e.Subject,
	)
	a.log.Info("access", args...)
}

// Handshake writes the line of a refused request (sampled).
func (a *AccessLog) Handshake(ctx *fasthttp.RequestCtx, status int, reason string) {
	if !a.on() {
		return
	}
	// Path, not RequestURI: the query string can carry a token.
	a.refused(ctx.RemoteAddr(), string(ctx.Path()), status, reason)
}

// Connection writes the line of a connection refused at accept (sampled).
// A nil AccessLog (a listener without access log) writes nothing.
func (a *AccessLog) Connection(c net.Conn, status int, reason string) {
	if a == nil || !a.on() {
		return
	}
	a.refused(c.RemoteAddr(), "", status, reason)
}

// refused writes the line of a refused handshake or connection, unless
// one was written less than RefusalLogEvery ago; the next line written
// carries the count left out, and once refusals stop for RefusalLogEvery
// a line of its own does.
func (a *AccessLog) refused(client net.Addr, path string, status int, reason string) {
	a.mu.Lock()
	now := time.Now()
	a.lastSeen = now
	n, ok := a.refusals.Note(now, RefusalLogEvery)
	if !ok && a.timer == nil {
		a.timer = time.AfterFunc(a.refusals.Wait(now, RefusalLogEvery), a.flush)
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	// Written outside the lock: a slow log sink slows this caller only.
	attrs := []any{"kind", "refused", "client", addrString(client)}
	if path != "" { // an HTTP request, not a connection refused at accept
		attrs = append(attrs, "path", path)
	}
	attrs = append(attrs, "status", status, "reason", reason, "dropped", n-1)
	a.log.Info("access", attrs...)
}

// flush writes the count of refusals left out since the last line, if
// any are and refusals have stopped; while they go on, the next refusal's
// own line will carry it, and flush looks again once RefusalLogEvery has
// passed since the latest.
func (a *AccessLog) flush() {
	a.mu.Lock()
	a.timer = nil
	if a.refusals.Pending() == 0 {
		a.mu.Unlock()
		return
	}
	now := time.Now()
	if quiet := now.Sub(a.lastSeen); quiet < RefusalLogEvery {
		a.timer = time.AfterFunc(RefusalLogEvery-quiet, a.flush)
		a.mu.Unlock()
		return
	}
	n := a.refusals.Take(now)
	a.mu.Unlock()
	a.log.Info("access", "kind", "refused", "dropped", n)
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
