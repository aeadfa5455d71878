package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/browsertest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// browserProbeJS opens window.probe's WebSocket on the page's origin and
// reports the protocol the page itself was loaded over.
const browserProbeJS = `(() => {
  const s = window.probe = {got: [], closed: null, waiters: []};
  const wake = () => { for (const w of s.waiters.splice(0)) w(); };
  s.ws = new WebSocket("wss://" + location.host + "/room/browser?hello=1");
  s.ws.onmessage = (e) => { s.got.push(typeof e.data === "string" ? e.data : "(binary)"); wake(); };
  s.ws.onclose = (e) => { s.closed = e.code; wake(); };
  return performance.getEntriesByType("navigation")[0].nextHopProtocol;
})()`

// browserWaitJS resolves once window.probe has %d messages, or has closed
// (%t: only once closed).
const browserWaitJS = `new Promise((resolve) => {
  const s = window.probe;
  const check = () => {
    if (s.closed !== null || (!%t && s.got.length >= %d)) {
      resolve(JSON.stringify({got: s.got, closed: s.closed, open: s.ws.readyState === WebSocket.OPEN}));
    } else {
      s.waiters.push(check);
    }
  };
  check();
})`

// TestClientH2Browser has headless Chromium load a page over HTTPS from the
// gateway (h2 on; Chromium accepts the test certificate's key), then open
// a WebSocket from it: the page came over h2, the WebSocket is an
// extended CONNECT stream of the same connection (the gateway serves one
// HTTP/2 connection, with two streams having been opened on it, and one
// tunnel), frames go both ways through a relay with a Go client over
// HTTP/1.1 in the same room, and a drain closes the page's WebSocket
// with 1001.
func TestClientH2Browser(t *testing.T) {
	f := newTLSFiles(t)
	ctx := browsertest.Start(t, chromedp.Flag("ignore-certificate-errors-spki-list", f.leafs[0].SPKIHash()))
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	addr := e.srv.TLSAddr().String()
	run := func(js string) string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
		return out
	}
	type probe struct {
		Got    []string `json:"got"`
		Closed *int     `json:"closed"`
		Open   bool     `json:"open"`
	}
	wait := func(n int, wantClose bool) probe {
		t.Helper()
		var p probe
		if err := json.Unmarshal([]byte(run(fmt.Sprintf(browserWaitJS, wantClose, n))), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("https://"+addr+"/info")); err != nil {
		t.Fatalf("browser: navigate over https: %v", err)
	}
	if proto := run(browserProbeJS); proto != "h2" {
		t.Fatalf("the page came over %q, want h2", proto)
	}
	if p := wait(1, false); p.Closed != nil || !p.Open || !strings.Contains(p.Got[0], "hello") {
		t.Fatalf("Chromium's WebSocket: %+v", p)
	}
	// The page's other requests (its favicon) end; the WebSocket's
	// stream stays.
	deadline := time.Now().Add(10 * time.Second)
	for st := e.srv.h2.Stats(); st.Conns != 1 || st.Streams != 1 || st.Opened < 2 || e.srv.Tunnels() != 1; st = e.srv.h2.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("HTTP/2 %+v, %d tunnels: want the page's connection, its WebSocket stream open, one tunnel", st, e.srv.Tunnels())
		}
		time.Sleep(5 * time.Millisecond)
	}
	peer, _, err := wssDial(addr, "/room/browser", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if err := peer.WriteMessage(websocket.TextMessage, []byte("from-go")); err != nil {
		t.Fatal(err)
	}
	if p := wait(2, false); p.Closed != nil || p.Got[1] != "from-go" {
		t.Fatalf("Chromium got %q (closed %v), want hello then from-go", p.Got, p.Closed)
	}
	run(`(() => { window.probe.ws.send("from-browser"); return ""; })()`)
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, got, err := peer.ReadMessage(); err != nil || string(got) != "from-browser" {
		t.Fatalf("Go client got %q, %v", got, err)
	}
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(context.Background()) }()
	if p := wait(0, true); p.Closed == nil || *p.Closed != 1001 {
		t.Fatalf("Chromium's WebSocket closed with %v, want 1001", p.Closed)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitH2Zero(t, e.srv)
}
