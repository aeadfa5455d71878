package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/net/http2"
)

// tlsFrom opens a TLS connection to addr from the loopback address from,
// offering h2 only.
func tlsFrom(addr, from string, f *tlsFiles) (*tls.Conn, error) {
	cfg := f.clientConfig("gw.test")
	cfg.NextProtos = []string{"h2"}
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return tls.DialWithDialer(d, "tcp", addr, cfg)
}

// floodUntilCut floods WINDOW_UPDATE(0, 1) on an HTTP/2 connection from
// from, reading what the gateway sends, until the connection ends; it
// returns the GOAWAY code read (0 if none), at most 200,000 frames.
func floodUntilCut(t *testing.T, addr, from string, f *tlsFiles) http2.ErrCode {
	t.Helper()
	tc, err := tlsFrom(addr, from, f)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
	got := make(chan http2.ErrCode, 1)
	go func() {
		defer close(got)
		fr := http2.NewFramer(io.Discard, tc)
		for {
			fm, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if g, ok := fm.(*http2.GoAwayFrame); ok {
				got <- g.ErrCode
			}
		}
	}()
	bw := bufio.NewWriterSize(tc, 32<<10)
	if _, err := io.WriteString(bw, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(bw, nil)
	_ = fr.WriteSettings()
	for i := range 200_000 {
		if fr.WriteWindowUpdate(0, 1) != nil {
			break
		}
		if i%1000 == 999 && bw.Flush() != nil {
			break
		}
	}
	_ = bw.Flush()
	select {
	case code := <-got:
		return code
	case <-time.After(20 * time.Second):
		t.Fatal("200,000 WINDOW_UPDATEs and the connection still open")
	}
	return 0
}

// TestClientFloodBackoff pins gateway.flood_backoff on the TLS listener:
// a client at 127.0.0.2 whose HTTP/2 connection is cut for flooding
// (GOAWAY ENHANCE_YOUR_CALM) has its next connections closed at accept,
// before a TLS handshake, counted as refused for flood_backoff, while a
// client at 127.0.0.1 connects and is served, its connection opened
// before the flood included; once the back-off is over 127.0.0.2
// connects again, and once forgiven the gateway remembers no address.
func TestClientFloodBackoff(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("flood_backoff = \"2s\"\nflood_backoff_max = \"3s\"",
		f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	addr := e.srv.TLSAddr().String()
	victim := h2DialAddr(t, addr, f)
	attacker := netip.MustParseAddr("127.0.0.2")

	if code := floodUntilCut(t, addr, "127.0.0.2", f); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("the flood's GOAWAY: %v, want ENHANCE_YOUR_CALM", code)
	}
	waitFlood(t, "the cut noted", func() bool { return counterValue(t, e.srv.floods.cuts) == 1 })
	refused := e.srv.metrics.Refused.WithLabelValues("flood_backoff")
	if _, err := tlsFrom(addr, "127.0.0.2", f); err == nil {
		// The back-off may have passed already on a slow machine: it is
		// only asserted when it still holds.
		if e.srv.floods.Left(attacker, time.Now()) > 0 {
			t.Fatal("127.0.0.2 completed a TLS handshake while refused")
		}
	} else if counterValue(t, refused) != 1 {
		t.Fatalf("refused for flood_backoff: %v, want 1", counterValue(t, refused))
	}
	tc, err := tlsFrom(addr, "127.0.0.1", f)
	if err != nil {
		t.Fatalf("127.0.0.1 refused while 127.0.0.2 is: %v", err)
	}
	tc.Close()
	ws, _, err := victim.Dialer(10*time.Second).Dial("ws://gw.test/room/v", nil)
	if err != nil {
		t.Fatalf("the victim's connection opened before the flood: %v", err)
	}
	ws.Close()

	// The back-off passes: 127.0.0.2 is served again.
	waitFlood(t, "127.0.0.2 served again", func() bool {
		c, err := tlsFrom(addr, "127.0.0.2", f)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// Forgiven (3s after the refusal ends), it is forgotten.
	waitFlood(t, "the address forgotten", func() bool { return e.srv.floods.Sweep(time.Now()) == 0 })
}

// waitFlood polls cond every 10 ms for at most 20 s.
func waitFlood(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// TestH2NodeFloodBackoff pins gateway.flood_backoff for an h2 pool's
// node: once its connection was cut for a PING flood (its client gets
// 1012), the node is not dialed again while the back-off runs: a new
// client of its pool gets the answer of a pool with no node up (503 and
// Retry-After), counted no_capacity, not a passive health failure; the
// victims' pool is served throughout, and once the back-off has passed
// the node is dialed again.
func TestH2NodeFloodBackoff(t *testing.T) {
	var sent atomic.Int64
	flood := pingFloodNode(t, &sent)
	echo := closingServer(t)
	e := newEnv(t, 0, fmt.Sprintf(`
[gateway]
listen = %%[1]q
flood_backoff = "3s"
flood_backoff_max = "3s"
[admin]
listen = ""
[[pools]]
name = "flood"
protocol = "h2"
h2_connections = 1
  [[pools.nodes]]
  addr = %q
[[pools]]
name = "echo"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/flood"
pool = "flood"
[[routes]]
path_prefix = "/"
pool = "echo"
`, flood, echo))
	victim := e.mustDial("/echo")
	defer victim.Close()
	fc := e.mustDial("/flood")
	defer fc.Close()
	if err := fc.WriteMessage(websocket.TextMessage, []byte("go")); err != nil {
		t.Fatal(err)
	}
	_ = fc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, _, err := fc.ReadMessage(); !websocket.IsCloseError(err, 1012) {
		t.Fatalf("the flooding node's client: %v, want 1012", err)
	}
	pool := e.srv.current().pools["flood"]
	set := pool.H2[pool.Node(flood)]
	waitFlood(t, "the node's cut noted", func() bool { return set.Stats().FloodCuts == 1 })
	_, resp, err := e.dial("/flood", nil)
	if set.Backoff() > 0 { // (a loaded machine may have outlived it)
		if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("a client of the backed-off node: %v %+v, want 503 with Retry-After", err, resp)
		}
		if st, _ := pool.Health.Status(flood); st.PassiveFailures != 0 {
			t.Fatalf("%d passive health failures counted for a node not dialed", st.PassiveFailures)
		}
	}
	echoOnce(t, victim, "the victims' pool is served")
	waitFlood(t, "the back-off over", func() bool { return set.Backoff() == 0 })
	c := e.mustDial("/flood") // dialed again
	c.Close()
	victim.Close()
	e.waitZero()
}

// TestFloodBackoffBehindProxyProtocol pins the back-off's address behind
// a balancer that sends PROXY headers: the address refused is the client
// the header carries (429 with Retry-After, counted flood_backoff), not
// the balancer's, whose other clients are served.
func TestFloodBackoffBehindProxyProtocol(t *testing.T) {
	node := newWireRecorder(t)
	srv := startGateway(t, recorderConfig(`
proxy_protocol = true
trusted_proxies = ["127.0.0.2/32"]
flood_backoff = "1m"
flood_backoff_max = "1m"`, node))
	gw := srv.Addr().String()
	srv.floods.cut(netip.MustParseAddr("203.0.113.9")) // as serveH2 does for a cut
	hdr := []byte(v1Header("203.0.113.9"))
	c := rawConn(t, gw, "127.0.0.2")
	_, _ = c.Write(append(hdr, upgradeReq("/a", "")...))
	resp := readAnswer(t, c)
	c.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the refused client behind the balancer: %d %v, want 429 with Retry-After", resp.StatusCode, resp.Header)
	}
	waitRefused(t, srv, "flood_backoff", 1)
	if code := viaBalancer(t, gw, []byte(v1Header("203.0.113.10")), upgradeReq("/b", "")); code != http.StatusSwitchingProtocols {
		t.Fatalf("another client behind the balancer: %d, want 101", code)
	}
}

// TestFloodBackoffReload pins a reload of the back-off's keys: turned
// off, it forgets every address, and an address it refused is served.
func TestFloodBackoffReload(t *testing.T) {
	node := newWireRecorder(t)
	srv := startGateway(t, recorderConfig(`flood_backoff = "1m"`, node))
	gw := srv.Addr().String()
	srv.floods.cut(netip.MustParseAddr("127.0.0.2"))
	c := rawConn(t, gw, "127.0.0.2")
	_, _ = c.Write([]byte(upgradeReq("/a", "")))
	if resp := readAnswer(t, c); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("refused address: %d, want 429", resp.StatusCode)
	}
	c.Close()
	cfg, err := conf.Parse("reload.toml", []byte(recorderConfig(`flood_backoff = "0s"`, node)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if n := srv.floods.Sweep(time.Now()); n != 0 {
		t.Fatalf("%d addresses remembered with the back-off off", n)
	}
	c = rawConn(t, gw, "127.0.0.2")
	defer c.Close()
	_, _ = c.Write([]byte(upgradeReq("/b", "")))
	if resp := readAnswer(t, c); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("after the reload: %d, want 101", resp.StatusCode)
	}
}
