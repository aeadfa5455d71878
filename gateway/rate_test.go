package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
)

// rateEnv is a gateway with handshake_rate_per_ip and two pools with an
// admission rate, one behind an http-503 route and one behind a
// close-1013 route, before a real node; its log is JSON with the access
// log on.
type rateEnv struct {
	srv  *Server
	gw   string
	logs *testproc.Buffer
}

func newRateEnv(t *testing.T, gateway string) *rateEnv {
	node := newWireRecorder(t)
	logs := &testproc.Buffer{}
	pools := ""
	for _, name := range []string{"slow", "slow1013"} {
		pools += fmt.Sprintf("[[pools]]\nname = %q\n  [pools.admission]\n  rate = 1\n  burst = 3\n  [[pools.nodes]]\n  addr = %q\n",
			name, node.srv.Listener.Addr().String())
	}
	srv := startGatewayLog(t, fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "100ms"
drain_timeout = "5s"
retry_after = "2s"
%s
[admin]
listen = ""
[log]
access = true
%s
[[routes]]
path_prefix = "/c/"
pool = "slow1013"
overflow = "close-1013"
[[routes]]
pool = "slow"
`, gateway, pools), slog.New(slog.NewJSONHandler(logs, nil)))
	return &rateEnv{srv: srv, gw: srv.Addr().String(), logs: logs}
}

// exchange sends req from the local address from and returns the answer.
func (e *rateEnv) exchange(t *testing.T, from, req string) *http.Response {
	t.Helper()
	c := rawConn(t, e.gw, from)
	defer c.Close()
	_, _ = c.Write([]byte(req))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// retryAfterIn checks a refusal's status and that its Retry-After is whole
// seconds in [lo, hi]; it returns the value.
func retryAfterIn(t *testing.T, resp *http.Response, status, lo, hi int) int {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d", resp.StatusCode, status)
	}
	v, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || v < lo || v > hi {
		t.Fatalf("Retry-After %q, want whole seconds in [%d, %d]", resp.Header.Get("Retry-After"), lo, hi)
	}
	return v
}

// TestPoolAdmissionRate pins issue 11 item 3's admission rate on a real
// gateway and node: a pool at rate 1, burst 3 admits its burst, then
// answers 503 with a Retry-After jittered in [retry_after, retry_after +
// ceil(burst/rate)] = [2, 5] to handshakes and plain requests alike; on a
// close-1013 route the refused handshake is upgraded and closed with
// 1013; each refusal is counted as result "admission" and access-logged.
func TestPoolAdmissionRate(t *testing.T) {
	e := newRateEnv(t, "")
	const tries = 24
	start := time.Now()
	ok, refused := 0, 0
	seen := map[int]bool{}
	for i := range tries {
		req := upgradeReq("/room", "")
		if i%3 == 2 {
			req = "GET /info HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
		}
		resp := e.exchange(t, "127.0.0.1", req)
		switch resp.StatusCode {
		case http.StatusSwitchingProtocols, http.StatusOK:
			ok++
		default:
			seen[retryAfterIn(t, resp, http.StatusServiceUnavailable, 2, 5)] = true
			refused++
		}
	}
	// Tokens: the burst plus what the rate refilled meanwhile (a bound
	// from the clock, not a speed).
	if most := 3 + int(time.Since(start).Seconds()) + 1; ok > most {
		t.Fatalf("%d admitted in %v, want at most %d", ok, time.Since(start), most)
	}
	if ok < 3 || refused == 0 {
		t.Fatalf("admitted %d, refused %d: want the burst admitted, then refusals", ok, refused)
	}
	if refused >= 8 && len(seen) < 2 {
		t.Errorf("Retry-After always %v over %d refusals: not jittered", seen, refused)
	}
	if got := e.srv.metrics.HandshakeCounts()["admission"]; got != uint64(refused) {
		t.Errorf("handshakes{result=admission} = %d, want %d", got, refused)
	}
	waitUntil(t, func() bool { return strings.Contains(e.logs.String(), `"reason":"admission"`) })

	// close-1013: the upgrade is accepted and closed with 1013.
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	got1013 := false
	for range 10 {
		c, _, err := d.Dial("ws://"+e.gw+"/c/room", nil)
		if err != nil {
			t.Fatalf("close-1013 route: %v", err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _, err = c.ReadMessage()
		c.Close()
		var ce *websocket.CloseError
		if errors.As(err, &ce) && ce.Code == 1013 {
			got1013 = true
			break
		}
	}
	if !got1013 {
		t.Fatal("no 1013 from the close-1013 route within 10 handshakes at rate 1, burst 3")
	}
}

// TestHandshakeRatePerIP pins handshake_rate_per_ip: one address over its
// rate gets 429 with a jittered Retry-After in [retry_after, retry_after +
// ceil(burst/rate)] = [2, 4], counted as result "ip_rate", while another
// address is still served; with max_conns_per_ip beside it each limit
// answers for itself.
func TestHandshakeRatePerIP(t *testing.T) {
	e := newRateEnv(t, "handshake_rate_per_ip = 1\nhandshake_burst_per_ip = 2\nmax_conns_per_ip = 50")
	const tries = 12
	start := time.Now()
	ok, refused := 0, 0
	for range tries {
		resp := e.exchange(t, "127.0.0.7", "GET /c/info HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
		if resp.StatusCode == http.StatusOK {
			ok++
			continue
		}
		retryAfterIn(t, resp, http.StatusTooManyRequests, 2, 4)
		refused++
	}
	if most := 2 + int(time.Since(start).Seconds()) + 1; ok > most || refused == 0 {
		t.Fatalf("from one address: %d admitted, %d refused in %v; want at most %d admitted", ok, refused, time.Since(start), most)
	}
	if resp := e.exchange(t, "127.0.0.8", "GET /c/info HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d, want 200", resp.StatusCode)
	}
	if got := e.srv.metrics.HandshakeCounts()["ip_rate"]; got != uint64(refused) {
		t.Errorf("handshakes{result=ip_rate} = %d, want %d", got, refused)
	}
	waitUntil(t, func() bool { return strings.Contains(e.logs.String(), `"reason":"ip_rate"`) })
}

// TestReloadRatesAndProxy pins what a reload does with the new keys:
// trusted_proxies, handshake_rate_per_ip and [pools.admission] apply to
// the next request (the pool keeps its bucket), proxy_protocol needs a
// restart.
func TestReloadRatesAndProxy(t *testing.T) {
	node := newWireRecorder(t)
	srv := startGateway(t, recorderConfig("", node))
	gw := srv.Addr().String()
	bucket := srv.current().pools["back"].Admit
	get := "GET /info HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
	e := &rateEnv{srv: srv, gw: gw}
	for range 3 {
		if resp := e.exchange(t, "127.0.0.9", get); resp.StatusCode != http.StatusOK {
			t.Fatalf("before the reload: %d", resp.StatusCode)
		}
	}
	cfg, err := conf.Parse("t.toml", []byte(strings.Replace(recorderConfig(`handshake_rate_per_ip = 1
handshake_burst_per_ip = 1
trusted_proxies = ["127.0.0.9"]`, node), `  [[pools.nodes]]`, "  [pools.admission]\n  rate = 1\n  burst = 2\n  [[pools.nodes]]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if srv.current().pools["back"].Admit != bucket {
		t.Error("the reload replaced the pool's admission bucket")
	}
	if ok, rate, burst := srv.current().pools["back"].Admit.Allow(); !ok || rate != 1 || burst != 2 {
		t.Errorf("admission after the reload: %v %d %d, want a token of rate 1, burst 2", ok, rate, burst)
	}
	if resp := e.exchange(t, "127.0.0.9", get); resp.StatusCode != http.StatusOK {
		t.Fatalf("first after the reload: %d", resp.StatusCode)
	}
	if resp := e.exchange(t, "127.0.0.9", get); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second after the reload at 1/s, burst 1: %d, want 429", resp.StatusCode)
	}
	if !srv.current().trusts(netip.MustParseAddr("127.0.0.9")) {
		t.Error("trusted_proxies not applied by the reload")
	}
	on := *cfg
	on.Gateway.ProxyProtocol = true
	if got := needsRestart(cfg, &on); !slices.Contains(got, "gateway.proxy_protocol") {
		t.Errorf("proxy_protocol on: needs restart %v", got)
	}
}
