package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/httpheader"
)

//go:embed dashboard/index.html
var dashboard embed.FS

// Gateway is the gateway as the admin API reads and steers it. Its
// methods are called from the admin listener's request goroutines, so
// they must be safe for concurrent use.
type Gateway interface {
	// Ready reports whether the gateway serves clients (GET /readyz),
	// and when it does not, why, in a sentence for the answer's body.
	Ready() (ready bool, reason string)
	// Draining reports whether the gateway is shutting down; a draining
	// gateway is not ready.
	Draining() bool
	// Nodes is the answer of GET /api/nodes: the gateway's counts and
	// every pool's nodes.
	Nodes() Nodes
	// Config is the config in force. GET /api/config shows it redacted
	// (see RedactedConfig), and its admin.hosts are the names the Host
	// check takes as this listener's (see ownHost).
	Config() *conf.Config
	// Reload reloads the config file now; its error names file, line and
	// key.
	Reload() error
	// LastReload is how the last reload went, as a value that encodes to
	// JSON (GET /api/reload and the "reload" of GET /api/nodes).
	LastReload() any
	// Revoke closes the tunnels of r's subject or key and refuses them
	// for r's TTL, on this gateway or on every replica, and says whether
	// it published r to the others and how many tunnels it closed here.
	Revoke(r Revocation) (published bool, closed int, err error)
	// DrainNode stops new connections to the node at addr in pool; with
	// migrate it also moves the node's tunnels to the others. It returns
	// the node as it is then and how many tunnels it is moving, or an
	// error wrapping ErrNoPool or ErrNoNode.
	DrainNode(pool, addr string, migrate bool) (Node, int, error)
	// UndrainNode lets the node at addr in pool take new connections again
	// (once healthy), and returns it as it is then, or an error wrapping
	// ErrNoPool or ErrNoNode.
	UndrainNode(pool, addr string) (Node, error)
}

// Errors a Gateway's DrainNode and UndrainNode return for a node the
// request names wrongly; the API answers 404.
var (
	// ErrNoPool is returned for a pool name the config in force does not
	// have.
	ErrNoPool = errors.New("admin: no such pool")
	// ErrNoNode is returned for a node address the pool does not have.
	ErrNoNode = errors.New("admin: no such node")
)

// Revocation is the body of POST /api/revoke: a subject (every credential
// of a principal) or a key (one credential, by the id its plugin gives it)
// whose tunnels must close, and for how long it may not come back.
type Revocation struct {
	Subject string `json:"subject,omitempty"`
	Key     string `json:"key,omitempty"`
	TTL     string `json:"ttl,omitempty"` // a duration such as "1h"
}

// API serves the admin listener: liveness, readiness, metrics, the
// node API and the dashboard. It is safe for concurrent use.
type API struct {
	gw Gateway
	// tokenSum is the SHA-256 of the bearer token; hasToken is false
	// when none is configured. Only digests are compared, so the
	// comparison takes as long whatever the length of either side.
	tokenSum   [sha256.Size]byte
	hasToken   bool
	listenHost string // host of admin.listen as configured at start
	metrics    fasthttp.RequestHandler
	page       []byte
}

// New returns the admin API of gw, set up from gw's config as it is now:
// the host of admin.listen is one of the names the Host check takes, and
// admin.token_env names the variable holding the bearer token, which must
// not be empty. GET /metrics serves what metrics gathers.
func New(gw Gateway, metrics prometheus.Gatherer) (*API, error) {
	a := &API{gw: gw}
	cfg := gw.Config().Admin
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil {
		a.listenHost = h
	}
	if env := cfg.TokenEnv; env != "" {
		tok := os.Getenv(env)
		if tok == "" {
			return nil, fmt.Errorf("admin.token_env names %s, which is empty or unset", env)
		}
		a.tokenSum, a.hasToken = sha256.Sum256([]byte(tok)), true
	}
	a.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	page, err := dashboard.ReadFile("dashboard/index.html")
	if err != nil {
		return nil, err
	}
	a.page = page
	return a, nil
}

// Handle routes one admin request. Liveness and readiness are answered to
// anyone, so every prober works. Every other request must name this
// listener in its Host header (see ownHost), and one that may change state
// (any method but GET and HEAD) must come from no foreign origin and carry
// a header a web page cannot send cross-site without asking first (see
// crossSiteSafe). The dashboard page (which holds no data) then needs no
// token; everything else does when one is configured.
func (a *API) Handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch path {
	case "/healthz":
		ctx.SetBodyString("ok\n")
		return
	case "/readyz":
		switch {
		case a.gw.Draining():
			ctx.Error("draining\n", fasthttp.StatusServiceUnavailable)
		default:
			if ok, why := a.gw.Ready(); !ok {
				ctx.Error("not ready: "+why+"\n", fasthttp.StatusServiceUnavailable)
				return
			}
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
		writeJSON(ctx, fasthttp.StatusOK, a.gw.Nodes())
	case path == "/api/config":
		if !method(ctx, fasthttp.MethodGet) {
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, RedactedConfig(a.gw.Config()))
	case path == "/api/reload":
		a.reload(ctx)
	case path == "/api/tls":
		a.tls(ctx)
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
func (a *API) reload(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		writeJSON(ctx, fasthttp.StatusOK, a.gw.LastReload())
	case fasthttp.MethodPost:
		if err := a.gw.Reload(); err != nil {
			jsonError(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, a.gw.LastReload())
	default:
		ctx.Response.Header.Set("Allow", "GET, POST")
		jsonError(ctx, fasthttp.StatusMethodNotAllowed, "use GET or POST")
	}
}

// revoke serves POST /api/revoke with a JSON body {"subject": "..."} or
// {"key": "..."} (and an optional "ttl"): every tunnel whose credential has
// that subject, or that credential id, is closed with 1008 and refused for
// the ttl, on this gateway or, with gateway.revoke_redis, on every replica.
func (a *API) revoke(ctx *fasthttp.RequestCtx) {
	if !method(ctx, fasthttp.MethodPost) {
		return
	}
	var r Revocation
	if err := json.Unmarshal(ctx.PostBody(), &r); err != nil {
		jsonError(ctx, fasthttp.StatusBadRequest, "body must be JSON like {\"subject\": \"alice\"} or {\"key\": \"<credential id>\"}: "+err.Error())
		return
	}
	published, closed, err := a.gw.Revoke(r)
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
func (a *API) authorized(ctx *fasthttp.RequestCtx) bool {
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
		if httpheader.Is(k, name) {
			n++
		}
	}
	return n
}

// nodeAction serves POST /api/pools/{pool}/nodes/{addr}/drain[?migrate=1]
// and .../undrain.
func (a *API) nodeAction(ctx *fasthttp.RequestCtx, rest string) {
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
	if parts[3] == "undrain" {
		v, err := a.gw.UndrainNode(poolName, addr)
		if err != nil {
			nodeError(ctx, err, poolName, addr)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, v)
		return
	}
	migrate := string(ctx.QueryArgs().Peek("migrate")) == "1"
	v, moved, err := a.gw.DrainNode(poolName, addr, migrate)
	if err != nil {
		nodeError(ctx, err, poolName, addr)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"node": v, "migrating": moved})
}

// nodeError answers a node action that failed: 404 for a pool or node
// that is not there.
func nodeError(ctx *fasthttp.RequestCtx, err error, poolName, addr string) {
	switch {
	case errors.Is(err, ErrNoPool):
		jsonError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no pool %q", poolName))
	case errors.Is(err, ErrNoNode):
		jsonError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("pool %q has no node %q", poolName, addr))
	default:
		jsonError(ctx, fasthttp.StatusInternalServerError, err.Error())
	}
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
