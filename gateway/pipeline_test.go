package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// orderNode is a node for the pipelining tests. A plain request gets 200
// with the body "plain <path>"; a handshake for a path under /deny gets
// 403 "denied"; any other handshake is upgraded, and each frame the client
// sends then comes back to it as a text frame "echo:<payload>".
func orderNode(t *testing.T) string {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !websocket.IsWebSocketUpgrade(r):
			_, _ = io.WriteString(w, "plain "+r.URL.Path)
			return
		case strings.HasPrefix(r.URL.Path, "/deny"):
			http.Error(w, "denied", http.StatusForbidden)
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
		for {
			h, p, err := nodeFrame(brw.Reader)
			if err != nil || h.Op == wsframe.OpClose {
				return
			}
			p = append([]byte("echo:"), p...)
			b := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpText, Length: uint64(len(p))})
			if _, err := c.Write(append(b, p...)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		wg.Wait()
	})
	return srv.Listener.Addr().String()
}

// plainGet is a plain request as a client pipelines it.
func plainGet(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: gw.test\r\n\r\n"
}

// handshakeReq is a valid WebSocket handshake for path.
func handshakeReq(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: gw.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
}

// clientFrame is a masked text frame carrying p, as a client sends it.
func clientFrame(p string) string {
	key := [4]byte{1, 2, 3, 4}
	b := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpText, Masked: true, Mask: key, Length: uint64(len(p))})
	m := []byte(p)
	wsframe.Mask(key, 0, m)
	return string(append(b, m...))
}

// TestPipelinedAnswersInOrder pins issue 19 item 2: requests pipelined
// in one write ahead of a handshake had their answers buffered by fasthttp
// while the 101 went straight to the socket, so the client got the 101
// first and the earlier answers inside its WebSocket stream. Each shape
// sends everything in one write on a real socket (plain TCP and TLS) and
// reads the answers back in the order they arrived: every earlier answer,
// then the 101, then the stream (frames the client sent right behind its
// handshake reach the node as the start of the stream).
func TestPipelinedAnswersInOrder(t *testing.T) {
	node := orderNode(t)
	f := newTLSFiles(t)
	e := newEnv(t, 0, fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll), "%[1]s", node))
	dial := map[string]func() (net.Conn, error){
		"tcp": func() (net.Conn, error) { return net.Dial("tcp", e.gw) },
		"tls": func() (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", e.srv.TLSAddr().String(), f.clientConfig("gw.test"))
		},
	}
	for _, tc := range []struct {
		name string
		send string
		want []string // status and body of each answer before the 101
		echo string   // the frame expected back after the 101; "" none
	}{
		{"get then upgrade", plainGet("/a") + handshakeReq("/ws"), []string{"200 plain /a"}, ""},
		{"refused upgrade then upgrade", handshakeReq("/deny") + handshakeReq("/ws"), []string{"403 denied\n"}, ""},
		{"get, get, upgrade, frame", plainGet("/a") + plainGet("/b") + handshakeReq("/ws") + clientFrame("hi"),
			[]string{"200 plain /a", "200 plain /b"}, "echo:hi"},
		{"upgrade then frame", handshakeReq("/ws") + clientFrame("first"), nil, "echo:first"},
	} {
		for _, transport := range []string{"tcp", "tls"} {
			t.Run(transport+" "+tc.name, func(t *testing.T) {
				c, err := dial[transport]()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a bound, not a speed
				if _, err := io.WriteString(c, tc.send); err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(c)
				for i, want := range tc.want {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("answer %d: %v", i+1, err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatalf("answer %d body: %v", i+1, err)
					}
					if got := fmt.Sprintf("%d %s", resp.StatusCode, body); got != want {
						t.Fatalf("answer %d: %q, want %q (answers must come in request order)", i+1, got, want)
					}
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v", len(tc.want)+1, err)
				}
				if resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("answer %d: %d, want 101", len(tc.want)+1, resp.StatusCode)
				}
				echo := tc.echo
				if echo == "" {
					// The stream must start clean: a frame sent now
					// comes back, with nothing before it.
					if _, err := io.WriteString(c, clientFrame("later")); err != nil {
						t.Fatal(err)
					}
					echo = "echo:later"
				}
				h, p, err := nodeFrame(br)
				if err != nil {
					t.Fatalf("first frame after the 101: %v", err)
				}
				if h.Op != wsframe.OpText || string(p) != echo {
					t.Fatalf("first frame after the 101: %v %q, want text %q", h.Op, p, echo)
				}
			})
		}
	}
	e.waitZero()
}

// TestPipelinedHandshakeClientGone checks that a handshake pipelined
// behind another request, whose 101 waits for fasthttp to flush the
// earlier answer (issue 19 item 2), releases its node connection, lease
// and slot when the client is gone before it is written: at once, when
// fasthttp closes the connection, not handshake_timeout later. It used to
// wait for the timer, so a client that sent a GET and an upgrade and reset
// held a node slot for handshake_timeout each, beyond what
// max_conns_per_ip counts. The timeout here is far longer than waitZero's
// 10 s, so only the release at the close passes.
func TestPipelinedHandshakeClientGone(t *testing.T) {
	e := rawNodeEnv(t, orderNode(t), `handshake_timeout = "60s"`)
	for range 5 {
		c, err := net.Dial("tcp", e.gw)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a FIN
		if _, err := io.WriteString(c, plainGet("/a")+handshakeReq("/ws")); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	e.waitZero()
}
