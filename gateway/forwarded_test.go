package gateway

import (
	"fmt"
	"net/http"
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
