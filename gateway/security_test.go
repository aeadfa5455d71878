package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// The tests in this file pin statements of docs/security.md that no other
// test showed: what a misbehaving node gets its clients, that max_frame
// bounds frames and not messages, the request size bounds, what a per-IP
// limit is keyed by, that rate limits belong to one gateway process, that
// a PROXY header counts only with proxy_protocol, and that the admin
// listener has no connection limits.

// rawNode is a node that answers health probes 200 and completes each
// WebSocket handshake itself, then hands the upgraded connection to
// misbehave, which owns it until it returns.
func rawNode(t *testing.T, misbehave func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer c.Close()
		_, _ = fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			upgrade.AcceptKey([]byte(r.Header.Get("Sec-WebSocket-Key"))))
		misbehave(c, brw.Reader)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		wg.Wait()
	})
	return srv.Listener.Addr().String()
}

// rawNodeEnv is a gateway (admin listener on) in front of the one node at
// node, with gateway lines added to its [gateway] section.
func rawNodeEnv(t *testing.T, node, gateway string) *env {
	cfg := strings.Replace(withAdminListen(oneNodeWith(gateway, "", "[[routes]]\npool = \"relay\"\nmax_frame = \"1KiB\"\n")),
		"%[2]q", strconv.Quote(node), 1)
	return newEnv(t, 0, cfg)
}

// nodeFrame reads one whole frame the gateway sent (to a node or a raw
// client) and returns its header and unmasked payload.
func nodeFrame(br *bufio.Reader) (wsframe.Header, []byte, error) {
	// The second byte says how long the header is: a 2- or 8-byte
	// extended length, and a 4-byte mask.
	b, err := br.Peek(2)
	if err != nil {
		return wsframe.Header{}, nil, err
	}
	n := 2 + map[byte]int{126: 2, 127: 8}[b[1]&0x7f]
	if b[1]&0x80 != 0 {
		n += 4
	}
	if b, err = br.Peek(n); err != nil {
		return wsframe.Header{}, nil, err
	}
	h, _, err := wsframe.ParseHeader(b)
	if err != nil {
		return h, nil, err
	}
	_, _ = br.Discard(n)
	p := make([]byte, h.Length)
	_, err = io.ReadFull(br, p)
	if h.Masked {
		wsframe.Mask(h.Mask, 0, p)
	}
	return h, p, err
}

// readClose reads messages off c until its close frame and returns the
// close code; it fails the test on any other end.
func readClose(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound, not a speed
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("want a close frame, got %v", err)
		}
		return ce.Code
	}
}

// TestBadNodeFrameGives1014 pins what a client gets when its node breaks
// the framing rules (here a masked frame, which a server never sends):
// close 1014, while the node is told 1002.
func TestBadNodeFrameGives1014(t *testing.T) {
	toNode := make(chan uint16, 1)
	node := rawNode(t, func(c net.Conn, br *bufio.Reader) {
		h := wsframe.Header{Fin: true, Op: wsframe.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 2}
		_, _ = c.Write(append(wsframe.AppendHeader(nil, h), 'h'^1, 'i'^2))
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			h, p, err := nodeFrame(br)
			if err != nil {
				toNode <- 0
				return
			}
			if h.Op == wsframe.OpClose {
				code, _, _ := wsframe.ParseClosePayload(p)
				toNode <- code
				return
			}
		}
	})
	e := rawNodeEnv(t, node, "")
	// A raw client: the WebSocket library refuses close code 1014 itself.
	c := rawConn(t, e.gw, "127.0.0.1")
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a bound, not a speed
	if _, err := io.WriteString(c, upgradeReq("/room/x", "")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	h, p, err := nodeFrame(br)
	if err != nil || h.Op != wsframe.OpClose {
		t.Fatalf("client got %+v %q %v, want a close frame", h, p, err)
	}
	if code, _, _ := wsframe.ParseClosePayload(p); code != 1014 {
		t.Fatalf("client got close %d, want 1014", code)
	}
	if code := <-toNode; code != 1002 {
		t.Fatalf("node got close %d, want 1002", code)
	}
}

// TestStalledNodeGives1012 pins write_timeout toward a node: a node that
// completes the handshake and then never reads is cut once it has taken
// no byte for write_timeout, its client gets close 1012, and the end is
// counted as wsgate_tunnels_closed_total{reason="write_timeout"}.
func TestStalledNodeGives1012(t *testing.T) {
	release := make(chan struct{})
	node := rawNode(t, func(c net.Conn, _ *bufio.Reader) {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		select { // never reads
		case <-release:
		case <-time.After(time.Minute):
		}
	})
	defer close(release)
	e := rawNodeEnv(t, node, `write_timeout = "300ms"`)
	c := e.mustDial("/room/x")
	defer c.Close()
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		msg := make([]byte, 1000) // under max_frame: one frame each
		for range 200_000 {       // at most 200 MB; the stall comes after a few MB
			select {
			case <-stop:
				return
			default:
			}
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if c.WriteMessage(websocket.BinaryMessage, msg) != nil {
				return
			}
		}
	}()
	code := readClose(t, c)
	close(stop)
	<-wrote
	if code != 1012 {
		t.Fatalf("client got close %d, want 1012", code)
	}
	waitUntil(t, func() bool {
		return counter(e.scrape(), "wsgate_tunnels_closed_total", "reason", "write_timeout") == 1
	})
}

// TestMaxFrameBoundsFramesNotMessages pins that max_frame applies to each
// frame: a message sent as several frames, each under the limit, reaches
// the node whole, however long it is in all.
func TestMaxFrameBoundsFramesNotMessages(t *testing.T) {
	type message struct{ frames, largest, total int }
	got := make(chan message, 1)
	node := rawNode(t, func(_ net.Conn, br *bufio.Reader) {
		var m message
		for {
			h, p, err := nodeFrame(br)
			if err != nil {
				got <- message{}
				return
			}
			m.frames++
			m.largest = max(m.largest, len(p))
			m.total += len(p)
			if h.Fin {
				got <- m
				return
			}
		}
	})
	e := rawNodeEnv(t, node, "") // max_frame = "1KiB"
	// The client library splits a message into frames of at most its
	// write buffer.
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, WriteBufferSize: 1024}
	c, _, err := d.Dial("ws://"+e.gw+"/room/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMessage(websocket.BinaryMessage, make([]byte, 10<<10)); err != nil {
		t.Fatal(err)
	}
	var m message
	select {
	case m = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the node got no whole message")
	}
	if m.total != 10<<10 || m.frames < 2 || m.largest > 1024 {
		t.Fatalf("node got %d bytes in %d frames (largest %d), want 10240 in frames of at most 1024", m.total, m.frames, m.largest)
	}
}

// TestRequestSizeBounds pins the bounds of a request on the client
// listener: headers that fill the 8 KiB read buffer get 431, a body
// declared over 4 MiB gets 400 before a byte of it is read, and neither
// reaches the node.
func TestRequestSizeBounds(t *testing.T) {
	node := newWireRecorder(t)
	srv := startGateway(t, recorderConfig("", node))
	gw := srv.Addr().String()
	// Exactly one read buffer of header with no end: the gateway reads all
	// of it, so its close after the answer resets nothing.
	head := "GET /info HTTP/1.1\r\nHost: gw\r\nX-Pad: "
	big := head + strings.Repeat("a", readBufferSize-len(head))
	for _, tc := range []struct {
		name, req string
		want      int
	}{
		{"headers over 8 KiB", big, http.StatusRequestHeaderFieldsTooLarge},
		{"body over 4 MiB", "POST /info HTTP/1.1\r\nHost: gw\r\nContent-Length: 4194305\r\n\r\n", http.StatusBadRequest},
		{"body of 4 MiB", "POST /info HTTP/1.1\r\nHost: gw\r\nContent-Length: 4194304\r\nConnection: close\r\n\r\n" +
			strings.Repeat("b", 4<<20), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := node.count()
			if got := rawExchange(t, gw, tc.req); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
			if reached := node.count() - before; (tc.want == http.StatusOK) != (reached == 1) {
				t.Fatalf("%d requests reached the node", reached)
			}
		})
	}
}

// TestRateLimitsPerProcess pins that handshake_rate_per_ip and a pool's
// admission rate are counted by each gateway process apart: with one
// gateway's bucket empty, another in front of the same node still admits.
func TestRateLimitsPerProcess(t *testing.T) {
	node := newWireRecorder(t)
	get := "GET /info HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name, gateway, admission string
		refused                  int
	}{
		{"handshake_rate_per_ip", "handshake_rate_per_ip = 1\nhandshake_burst_per_ip = 1", "", http.StatusTooManyRequests},
		{"pools.admission", "", "  [pools.admission]\n  rate = 1\n  burst = 1\n", http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(recorderConfig(tc.gateway, node), "  [[pools.nodes]]", tc.admission+"  [[pools.nodes]]", 1)
			a, b := startGateway(t, cfg), startGateway(t, cfg)
			refused := false
			for range 20 { // the bucket holds one token and refills one a second
				if rawExchange(t, a.Addr().String(), get) == tc.refused {
					refused = true
					break
				}
			}
			if !refused {
				t.Fatalf("the first gateway never answered %d", tc.refused)
			}
			if got := rawExchange(t, b.Addr().String(), get); got != http.StatusOK {
				t.Fatalf("the second gateway answered %d with the first one's bucket empty, want 200", got)
			}
		})
	}
}

// TestProxyHeaderWithoutProxyProtocol pins that a listener without
// proxy_protocol takes a PROXY header for a malformed request, even from
// an address in trusted_proxies: 400, and nothing reaches the node, so a
// client cannot name its own address that way.
func TestProxyHeaderWithoutProxyProtocol(t *testing.T) {
	node := newWireRecorder(t)
	srv := startGateway(t, recorderConfig(`trusted_proxies = ["127.0.0.0/8"]`, node))
	before := node.count()
	if got := rawExchange(t, srv.Addr().String(), v1Header("203.0.113.9")+upgradeReq("/room/x", "")); got != http.StatusBadRequest {
		t.Fatalf("PROXY header without proxy_protocol: %d, want 400", got)
	}
	if n := node.count() - before; n != 0 {
		t.Fatalf("%d requests reached the node", n)
	}
}

// TestAdminListenerHasNoConnectionLimits pins that the admin listener
// shares none of the client listeners' connection limits and has none of
// its own: with max_conns = 1 taken by a client, silent connections to
// the admin listener are held and it still answers.
func TestAdminListenerHasNoConnectionLimits(t *testing.T) {
	e := newEnv(t, 1, withAdminListen(oneNodeWith("max_conns = 1\nmax_conns_per_ip = 1", "", "")))
	rawConn(t, e.gw, "127.0.0.1")
	e.waitOpen(1)
	for range 3 {
		rawConn(t, e.srv.AdminAddr().String(), "127.0.0.1")
	}
	if code, body := e.admin(http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Fatalf("admin /healthz beside 3 silent admin connections: %d %s", code, body)
	}
}
