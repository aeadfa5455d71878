package admin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
)

// fakeGateway is a Gateway with one pool, "relay", of one node,
// "10.0.0.1:80", whose drains it records.
type fakeGateway struct {
	cfg     *conf.Config
	drained string // "", "drained" or "migrating"
}

func (g *fakeGateway) Ready() (bool, string) { return true, "" }
func (g *fakeGateway) Draining() bool        { return false }
func (g *fakeGateway) Nodes() Nodes          { return Nodes{Ready: true} }
func (g *fakeGateway) Config() *conf.Config  { return g.cfg }
func (g *fakeGateway) Reload() error         { return nil }
func (g *fakeGateway) LastReload() any       { return map[string]string{"result": "none"} }

func (g *fakeGateway) Revoke(Revocation) (bool, int, error) { return false, 0, nil }

func (g *fakeGateway) find(pool, addr string) error {
	switch {
	case pool != "relay":
		return fmt.Errorf("pool %q: %w", pool, ErrNoPool)
	case addr != "10.0.0.1:80":
		return fmt.Errorf("node %q: %w", addr, ErrNoNode)
	}
	return nil
}

func (g *fakeGateway) node() Node {
	state := "up"
	if g.drained != "" {
		state = "draining"
	}
	return Node{Addr: "10.0.0.1:80", State: state, Live: 3, MaxConns: 100, Weight: 1}
}

func (g *fakeGateway) DrainNode(pool, addr string, migrate bool) (Node, int, error) {
	if err := g.find(pool, addr); err != nil {
		return Node{}, 0, err
	}
	g.drained = "drained"
	if migrate {
		g.drained = "migrating"
		return g.node(), 3, nil
	}
	return g.node(), 0, nil
}

func (g *fakeGateway) UndrainNode(pool, addr string) (Node, error) {
	if err := g.find(pool, addr); err != nil {
		return Node{}, err
	}
	g.drained = ""
	return g.node(), nil
}

// do sends the API one request as a script would and returns the status
// and body of the answer.
func do(a *API, method, uri string) (int, string) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	ctx.Request.Header.SetHost("127.0.0.1:9090")
	ctx.Request.Header.SetContentType("application/json")
	a.Handle(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Body())
}

// TestNodeActions pins the answers of the drain and undrain endpoints,
// and the 404s of a node or pool the Gateway does not have.
func TestNodeActions(t *testing.T) {
	gw := &fakeGateway{cfg: &conf.Config{}}
	a, err := New(gw, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	node := func(state string) string {
		return `{
    "addr": "10.0.0.1:80",
    "state": "` + state + `",
    "live": 3,
    "max_conns": 100,
    "weight": 1
  }`
	}
	for _, tc := range []struct {
		method, uri string
		want        int
		body        string
		drained     string
	}{
		{"POST", "/api/pools/nope/nodes/10.0.0.1:80/drain", 404, "{\n  \"error\": \"no pool \\\"nope\\\"\"\n}\n", ""},
		{"POST", "/api/pools/relay/nodes/10.0.0.9:80/undrain", 404, "{\n  \"error\": \"pool \\\"relay\\\" has no node \\\"10.0.0.9:80\\\"\"\n}\n", ""},
		{"GET", "/api/pools/relay/nodes/10.0.0.1:80/drain", 405, "{\n  \"error\": \"use POST\"\n}\n", ""},
		{"POST", "/api/pools/relay/nodes/10.0.0.1:80/drain", 200, "{\n  \"migrating\": 0,\n  \"node\": " + node("draining") + "\n}\n", "drained"},
		{"POST", "/api/pools/relay/nodes/10.0.0.1:80/undrain", 200, strings.ReplaceAll(node("up"), "\n  ", "\n") + "\n", ""},
		{"POST", "/api/pools/relay/nodes/10.0.0.1:80/drain?migrate=1", 200, "{\n  \"migrating\": 3,\n  \"node\": " + node("draining") + "\n}\n", "migrating"},
	} {
		code, body := do(a, tc.method, tc.uri)
		if code != tc.want || body != tc.body || gw.drained != tc.drained {
			t.Errorf("%s %s: %d %s (node %q)\nwant %d %s (node %q)", tc.method, tc.uri, code, body, gw.drained, tc.want, tc.body, tc.drained)
		}
	}
}

// TestNewNeedsToken checks that an admin.token_env naming an empty or
// unset variable is refused: the API would otherwise run without a token.
func TestNewNeedsToken(t *testing.T) {
	t.Setenv("WSGATE_TEST_EMPTY_TOKEN", "")
	gw := &fakeGateway{cfg: &conf.Config{Admin: conf.Admin{TokenEnv: "WSGATE_TEST_EMPTY_TOKEN"}}}
	if _, err := New(gw, prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), "WSGATE_TEST_EMPTY_TOKEN, which is empty or unset") {
		t.Fatalf("New with an empty token: %v", err)
	}
}

var _ Gateway = (*fakeGateway)(nil)
