package gateway

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/wsgate/wsgate/balancer"
)

//go:embed dashboard/index.html
var dashboard embed.FS

// adminAPI serves the admin listener: liveness, readiness, metrics, the
// node API and the dashboard.
type adminAPI struct {
	s *Server
	// tokenSum is the SHA-256 of the bearer token; hasToken is false
	// when none is configured. Only digests are compared, so the
	// comparison takes as long whatever the length of either side.
	tokenSum   [sha256.Size]byte
	hasToken   bool
	listenHost string // host of admin.listen as configured at start
	metrics    fasthttp.RequestHandler
	page       []byte
}

func newAdminAPI(s *Server) (*adminAPI, error) {
	a := &adminAPI{s: s}
	if h, _, err := net.SplitHostPort(s.current().cfg.Admin.Listen); err == nil {
		a.listenHost = h
	}
	if env := s.current().cfg.Admin.TokenEnv; env != "" {
		tok := os.Getenv(env)
		if tok == "" {
			return nil, fmt.Errorf("admin.token_env names %s, which is empty or unset", env)
		}
		a.tokenSum, a.hasToken = sha256.Sum256([]byte(tok)), true
	}
	a.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	page, err := dashboard.ReadFile("dashboard/index.html")
	if err != nil {
		return nil, err
	}
	a.page = page
	return a, nil
}

// handle routes one admin request. Liveness and readiness are answered to
// anyone, so every prober works. Every other request must name this
// listener in its Host header (see ownHost), and one that may change state
// (any method but GET and HEAD) must come from no foreign origin and carry
// a header a web page cannot send cross-site without asking first (see
// crossSiteSafe). The dashboard page (which holds no data) then needs no
// token; everything else does when one is configured.
func (a *adminAPI) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch path {
	case "/healthz":
		ctx.SetBodyString("ok\n")
		return
	case "/readyz":
		switch {
		case a.s.draining.Load():
			ctx.Error("draining\n", fasthttp.StatusServiceUnavailable)
		case !a.s.ready.Load():
			ctx.Error("not ready\n", fasthttp.StatusServiceUnavailable)
		default:
			ctx.SetBodyString("ready\n")
		}
		return
	}
	if !a.ownHost(ctx) || !crossSiteSafe(ctx) {
		return
	}
	if path == "/" {
		ctx.SetContentType("text/html; charset=utf-8")
		ctx.SetBody(a.page)
		return
	}
	if n := headerCount(&ctx.Request.Header, "authorization"); n > 1 {
		// One would decide and the other be ignored; which one depends
		// on who reads them.
		jsonError(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("%d Authorization headers: send one", n))
		return
	}
	if !a.authorized(ctx) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="wsgate admin"`)
		jsonError(ctx, fasthttp.StatusUnauthorized, "missing or wrong bearer token")
		return
	}
	switch {
	case path == "/metrics":
		a.metrics(ctx)
	case path == "/api/nodes":
		if !method(ctx, fasthttp.MethodGet) {
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, a.s.nodesView())
	case path == "/api/config":
		if !method(ctx, fasthttp.MethodGet) {
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, redactedConfig(a.s.current().cfg))
	case path == "/api/reload":
		a.reload(ctx)
	case path == "/api/revoke":
		a.revoke(ctx)
	case strings.HasPrefix(path, "/api/pools/"):
		a.nodeAction(ctx, strings.TrimPrefix(path, "/api/pools/"))
	default:
		jsonError(ctx, fasthttp.StatusNotFound, "no admin endpoint "+path)
	}
}

// reload serves POST /api/reload (reload the config file now: 200 with the
// new generation, or 400 with the error naming file, line and key) and
// GET /api/reload (how the last reload went).
func (a *adminAPI) reload(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		writeJSON(ctx, fasthttp.StatusOK, a.s.LastReload())
	case fasthttp.MethodPost:
		if err := a.s.Reload(); err != nil {
			jsonError(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, a.s.LastReload())
	default:
		ctx.Response.Header.Set("Allow", "GET, POST")
		jsonError(ctx, fasthttp.StatusMethodNotAllowed, "use GET or POST")
	}
}

// revoke serves POST /api/revoke with a JSON body {"subject": "..."} or
// {"key": "..."} (and an optional "ttl"): every tunnel whose credential has
// that subject, or that credential id, is closed with 1008 and refused for
// the ttl, on this gateway or, with gateway.revoke_redis, on every replica.
func (a *adminAPI) revoke(ctx *fasthttp.RequestCtx) {
	if !method(ctx, fasthttp.MethodPost) {
		return
	}
	var r revocation
	if err := json.Unmarshal(ctx.PostBody(), &r); err != nil {
		jsonError(ctx, fasthttp.StatusBadRequest, "body must be JSON like {\"subject\": \"alice\"} or {\"key\": \"<credential id>\"}: "+err.Error())
		return
	}
	published, closed, err := a.s.revoke(r)
	if err != nil {
		jsonError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"subject": r.Subject, "key": r.Key, "published": published, "closed": closed})
}

// authorized reports whether the request carries the bearer token, when
// one is configured. The token sent and the configured one are compared
// as SHA-256 digests in constant time: a comparison of the tokens
// themselves returns at once when their lengths differ, which tells a
// prober the token's length.
func (a *adminAPI) authorized(ctx *fasthttp.RequestCtx) bool {
	if !a.hasToken {
		return true
	}
	got, ok := bytes.CutPrefix(ctx.Request.Header.Peek("Authorization"), []byte("Bearer "))
	sum := sha256.Sum256(got)
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1 && ok
}

// headerCount counts the request headers named name (lowercase), under
// any spelling.
func headerCount(h *fasthttp.RequestHeader, name string) int {
	n := 0
	for k := range h.All() {
		if headerIs(k, name) {
			n++
		}
	}
	return n
}

// nodeAction serves POST /api/pools/{pool}/nodes/{addr}/drain[?migrate=1]
// and .../undrain.
func (a *adminAPI) nodeAction(ctx *fasthttp.RequestCtx, rest string) {
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != "nodes" || (parts[3] != "drain" && parts[3] != "undrain") {
		jsonError(ctx, fasthttp.StatusNotFound, "want /api/pools/{pool}/nodes/{addr}/drain or /undrain")
		return
	}
	if !method(ctx, fasthttp.MethodPost) {
		return
	}
	poolName, _ := url.PathUnescape(parts[0])
	addr, _ := url.PathUnescape(parts[2])
	p := a.s.current().pools[poolName]
	if p == nil {
		jsonError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no pool %q", poolName))
		return
	}
	n := p.node(addr)
	if n == nil {
		jsonError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("pool %q has no node %q", poolName, addr))
		return
	}
	if parts[3] == "undrain" {
		a.s.undrainNode(p, n)
		writeJSON(ctx, fasthttp.StatusOK, a.s.nodeView(p, n))
		return
	}
	migrate := string(ctx.QueryArgs().Peek("migrate")) == "1"
	moved := a.s.drainNode(p, n, migrate)
	v := a.s.nodeView(p, n)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"node": v, "migrating": moved})
}

func method(ctx *fasthttp.RequestCtx, want string) bool {
	if string(ctx.Method()) == want {
		return true
	}
	ctx.Response.Header.Set("Allow", want)
	jsonError(ctx, fasthttp.StatusMethodNotAllowed, "use "+want)
	return false
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	enc := json.NewEncoder(ctx)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // messages quote config values such as ">= 0"
	_ = enc.Encode(v)
}

func jsonError(ctx *fasthttp.RequestCtx, status int, msg string) {
	writeJSON(ctx, status, map[string]string{"error": msg})
}

// node returns the pool's node at addr, or nil.
func (p *pool) node(addr string) *balancer.Node {
	for _, n := range p.bal.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}
