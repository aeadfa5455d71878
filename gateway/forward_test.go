package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/net/http2/hpack"
)

// TestForwardedReplacedOverTLSAndHTTP2 pins the Forwarded field (RFC 7239)
// on the TLS listener, over HTTP/1.1 and HTTP/2 streams, upgrades and
// plain requests: the node gets the gateway's own element (the client's
// address, proto=https), never the one the client sent, as with
// X-Forwarded-For. Before, the client's reached the node unchanged.
func TestForwardedReplacedOverTLSAndHTTP2(t *testing.T) {
	f := newTLSFiles(t)
	back := newRecorder(t)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll), "127.0.0.1:0", back.addr())
	srv := startGateway(t, cfg)
	forged := http.Header{"Forwarded": {"for=6.6.6.6;proto=http;host=evil.test"}, "X-Forwarded-For": {"6.6.6.6"}}
	const want = "for=127.0.0.1;proto=https"
	check := func(what string) {
		t.Helper()
		hs := back.headers()
		if len(hs) == 0 {
			t.Fatalf("%s: the node saw nothing", what)
		}
		h := hs[len(hs)-1]
		if got := h.Values("Forwarded"); len(got) != 1 || got[0] != want {
			t.Errorf("%s: Forwarded at the node %q, want %q", what, got, want)
		}
		if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("%s: X-Forwarded-For at the node %q", what, got)
		}
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, TLSClientConfig: f.clientConfig("gw.test")}
	c, _, err := d.Dial("wss://"+srv.TLSAddr().String()+"/room/fwd", forged)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	check("a WebSocket over TLS")
	hc := h2Dial(t, srv, f)
	c, _, err = hc.Dialer(10*time.Second).Dial("ws://gw.test/room/fwd", forged)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	check("a WebSocket over HTTP/2")
	fields := http.Header{}
	for k, v := range forged {
		fields[k] = v
	}
	s, err := hc.OpenRequest([]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/info"}}, fields, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Response(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	check("a plain request over HTTP/2")
}

// TestProxyFailuresThrottledAndCounted pins the log of plain requests a
// node fails: 40 GETs to a node that drops every request's connection
// make at most one "proxy request failed" line a second, each with the
// failures since the line before, and every failed try is counted in
// wsgate_proxy_errors_total. Before, each failure was a WARN line of its
// own, so a client that could make requests fail filled the log.
func TestProxyFailuresThrottledAndCounted(t *testing.T) {
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close() // no answer
		}
	}))
	t.Cleanup(node.Close)
	var logs lockedBuffer
	srv := startGatewayLog(t, fmt.Sprintf("[gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n[[pools]]\nname = \"back\"\n"+
		"  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"back\"\n", strings.TrimPrefix(node.URL, "http://")),
		slog.New(slog.NewTextHandler(&logs, nil)))
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	const gets = 40
	for range gets {
		resp, err := client.Get("http://" + srv.Addr().String() + "/info")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("GET: %d, want 502", resp.StatusCode)
		}
	}
	elapsed := time.Since(start)
	client.CloseIdleConnections()
	failed := counterValue(t, srv.metrics.ProxyErrors.WithLabelValues("back"))
	lines := strings.Count(logs.String(), "proxy request failed")
	t.Logf("%d GETs in %s: %v failures counted, %d lines", gets, elapsed, failed, lines)
	if failed < gets {
		t.Errorf("wsgate_proxy_errors_total{pool=\"back\"} = %v, want at least %d", failed, gets)
	}
	if max := 1 + int(elapsed/time.Second); lines > max {
		t.Errorf("%d lines of \"proxy request failed\" in %s, want at most %d (one a second)", lines, elapsed, max)
	}
}
