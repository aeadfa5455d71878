package upgrade

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// testPool is a pool of one node at addr with connect_timeout timeout.
func testPool(t *testing.T, addr string, timeout time.Duration) (*upstream.Pool, *balancer.Node) {
	t.Helper()
	cfg, err := conf.Parse("dial.toml", fmt.Appendf(nil, `
[[routes]]
pool = "relay"
[[pools]]
name = "relay"
connect_timeout = %q
  [[pools.nodes]]
  addr = %q
`, timeout, addr))
	if err != nil {
		t.Fatal(err)
	}
	p, _, _, err := upstream.NewPool(&cfg.Pools[0], nil, nil, balancer.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil,
		func(int, int) upstream.Admission { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Health.Stop)
	return p, p.Balancer.Nodes()[0]
}

// scriptedNode accepts one connection at a time, reads a request's header
// and answers with answer (nothing when it is empty: a node that never
// answers, holding the connection until the test ends).
func scriptedNode(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				got := ""
				for !strings.Contains(got, "\r\n\r\n") {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got += string(buf[:n])
				}
				if answer != "" {
					_, _ = c.Write([]byte(answer))
				}
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// TestDialNodeBothWays runs DialNode's outcomes on both of its dials: a
// bare socket a poller watches (polled) and Go's net package. A 101 keeps
// the bytes the node sent behind it, a 4xx is passed on, a silent node
// times out at connect_timeout and a refused connect is the node's
// failure; every node socket is closed or kept by its connection.
func TestDialNodeBothWays(t *testing.T) {
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	accept := AppendAccept(nil, []byte(key))
	req := []byte("GET /room/x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n")
	frame := "\x81\x05hello"
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	for _, polled := range []bool{true, false} {
		t.Run(fmt.Sprintf("polled=%v", polled), func(t *testing.T) {
			t.Run("101 with a frame behind it", func(t *testing.T) {
				p, n := testPool(t, scriptedNode(t, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+string(accept)+"\r\nX-Node: 1\r\n\r\n"+frame), 5*time.Second)
				var up NodeConn
				answer, err := DialNode(p, n, req, accept, &up, nil, polled)
				if err != nil || answer != nil {
					t.Fatalf("DialNode: %v, answer %v", err, answer)
				}
				defer up.Conn.Close()
				if _, bare := up.Conn.(*tunnel.NodeSocket); bare != polled {
					t.Errorf("node connection %T, polled %v", up.Conn, polled)
				}
				// The frame may come in the 101's segment or after it.
				got := string(up.Pending)
				if len(got) < len(frame) {
					_ = up.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
					rest := make([]byte, len(frame)-len(got))
					if _, err := io.ReadFull(up.Conn, rest); err != nil {
						t.Fatalf("read the frame behind the 101: %v", err)
					}
					got += string(rest)
				}
				if got != frame || !strings.Contains(string(up.Header), "X-Node: 1\r\n") {
					t.Fatalf("frame %q, client's 101 %q", got, up.Header)
				}
			})
			t.Run("4xx passed on", func(t *testing.T) {
				p, n := testPool(t, scriptedNode(t, "HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope"), 5*time.Second)
				var up NodeConn
				answer, err := DialNode(p, n, req, accept, &up, nil, polled)
				if err != nil || answer == nil || answer.StatusCode() != 403 || string(answer.Body()) != "nope" {
					t.Fatalf("DialNode: %v, answer %v", err, answer)
				}
			})
			t.Run("silent node", func(t *testing.T) {
				p, n := testPool(t, scriptedNode(t, ""), 200*time.Millisecond)
				var up NodeConn
				_, err := DialNode(p, n, req, accept, &up, nil, polled)
				var te interface{ Timeout() bool }
				if !errors.Is(err, ErrUpstream) || !errors.As(err, &te) || !te.Timeout() {
					t.Fatalf("DialNode: %v, want ErrUpstream after a timeout", err)
				}
			})
			t.Run("refused", func(t *testing.T) {
				p, n := testPool(t, refused(), 5*time.Second)
				var up NodeConn
				_, err := DialNode(p, n, req, accept, &up, nil, polled)
				if !errors.Is(err, ErrUpstream) || errors.Is(err, upstream.ErrLocalDial) || !strings.Contains(err.Error(), "connection refused") {
					t.Fatalf("DialNode: %v, want ErrUpstream with the refusal", err)
				}
			})
			if n := tunnel.NodeSockets(); n != 0 {
				t.Fatalf("%d node sockets left open", n)
			}
		})
	}
}
