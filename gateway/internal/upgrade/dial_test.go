package upgrade

import (
	"bytes"
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

// testKey is the client's Sec-WebSocket-Key in these tests.
const testKey = "dGhlIHNhbXBsZSBub25jZQ=="

// testRequest is an upgrade request for the node, with testKey.
var testRequest = []byte("GET /room/x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testKey + "\r\n\r\n")

// testAnswer is a node's 101 to testRequest, with extra header lines.
func testAnswer(extra string) string {
	return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + AcceptKey([]byte(testKey)) + "\r\n" + extra + "\r\n"
}

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
	p, _, _, err := upstream.NewPool(&cfg.Pools[0], nil, nil, balancer.NewRegistry(), slog.New(slog.DiscardHandler), nil,
		func(int, int) upstream.Admission { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Health.Stop)
	return p, p.Node(addr)
}

// testNode is a node that serves each connection with serve once it has
// read a request's header, then reads until the gateway closes its end
// (or resets it), which it reports on closed. The pool's health probes are connections
// too: serve sees them as well.
func testNode(t *testing.T, serve func(c net.Conn)) (addr string, closed <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	gone := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				buf := make([]byte, 4096)
				got := ""
				for !strings.Contains(got, "\r\n\r\n") {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got += string(buf[:n])
				}
				if !strings.HasPrefix(got, "GET /room/") {
					return // a health probe
				}
				serve(c)
				// EOF, or a reset when the gateway closed with bytes
				// unread; not the deadline.
				var te interface{ Timeout() bool }
				if _, err := io.Copy(io.Discard, c); !errors.As(err, &te) || !te.Timeout() {
					gone <- struct{}{}
				}
			}()
		}
	}()
	return ln.Addr().String(), gone
}

// answering serves a connection by writing answer.
func answering(answer string) func(net.Conn) {
	return func(c net.Conn) { _, _ = c.Write([]byte(answer)) }
}

// TestDialNodeBothWays runs DialNode's outcomes on both of its dials: a
// bare socket a poller watches (polled) and Go's net package. A 101 keeps
// what the node sent behind it; a 4xx is passed on; a 5xx, a wrong accept
// key, a silent node past connect_timeout and a refused connect fail as
// the node's failures, and the gateway's end of each failed connection is
// closed (the node reads its end); no node socket is left open.
func TestDialNodeBothWays(t *testing.T) {
	accept := AppendAccept(nil, []byte(testKey))
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
				addr, closed := testNode(t, answering(testAnswer("X-Node: 1\r\n")+frame))
				p, n := testPool(t, addr, 5*time.Second)
				var up NodeConn
				answer, err := DialNode(p, n, testRequest, accept, &up, nil, polled, nil)
				if err != nil || answer != nil {
					t.Fatalf("DialNode: %v, answer %v", err, answer)
				}
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
				_ = up.Conn.Close()
				waitClosed(t, closed)
			})
			t.Run("4xx passed on", func(t *testing.T) {
				addr, closed := testNode(t, answering("HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope"))
				p, n := testPool(t, addr, 5*time.Second)
				var up NodeConn
				answer, err := DialNode(p, n, testRequest, accept, &up, nil, polled, nil)
				if err != nil || answer == nil || answer.StatusCode() != 403 || string(answer.Body()) != "nope" {
					t.Fatalf("DialNode: %v, answer %v", err, answer)
				}
				waitClosed(t, closed)
			})
			for _, tc := range []struct {
				name   string
				serve  func(net.Conn)
				expect func(error) bool
			}{
				{"5xx", answering("HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"), nil},
				{"wrong accept key", answering("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAA\r\n\r\n"), nil},
				{"silent past connect_timeout", func(net.Conn) {}, func(err error) bool {
					var te interface{ Timeout() bool }
					return errors.As(err, &te) && te.Timeout()
				}},
				{"101 trickled past connect_timeout", trickle(testAnswer(""), 20*time.Millisecond), nil},
			} {
				t.Run(tc.name, func(t *testing.T) {
					addr, closed := testNode(t, tc.serve)
					p, n := testPool(t, addr, 300*time.Millisecond)
					var up NodeConn
					_, err := DialNode(p, n, testRequest, accept, &up, nil, polled, nil)
					if !errors.Is(err, ErrUpstream) || errors.Is(err, upstream.ErrLocalDial) || (tc.expect != nil && !tc.expect(err)) {
						t.Fatalf("DialNode: %v, want the node's failure", err)
					}
					waitClosed(t, closed)
				})
			}
			t.Run("101 trickled within connect_timeout", func(t *testing.T) {
				addr, closed := testNode(t, trickle(testAnswer(""), time.Millisecond))
				p, n := testPool(t, addr, 10*time.Second)
				var up NodeConn
				if _, err := DialNode(p, n, testRequest, accept, &up, nil, polled, nil); err != nil {
					t.Fatalf("DialNode: %v", err)
				}
				_ = up.Conn.Close()
				waitClosed(t, closed)
			})
			t.Run("refused", func(t *testing.T) {
				addr := refused()
				p, n := testPool(t, addr, 5*time.Second)
				var up NodeConn
				_, err := DialNode(p, n, testRequest, accept, &up, nil, polled, nil)
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

// trickle serves a connection by writing answer a byte at a time, every.
func trickle(answer string, every time.Duration) func(net.Conn) {
	return func(c net.Conn) {
		for i := range len(answer) {
			if _, err := c.Write([]byte{answer[i]}); err != nil {
				return
			}
			time.Sleep(every)
		}
	}
}

// waitClosed waits for a test node to see the gateway close its end.
func waitClosed(t *testing.T, closed <-chan struct{}) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway's end of the node connection was not closed")
	}
}

// TestDialNodeSocketAnswerWithFrames: a node that sends its 101, a
// frame far larger than the answer's read buffer, a close frame and its
// FIN in one write, before the tunnel exists. The handshake runs on a
// NodeSocket (whose reads took the edges), the tunnel takes the socket
// over, and the client gets every byte after the 101, then the node's
// end.
func TestDialNodeSocketAnswerWithFrames(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 300<<10)
	var after []byte
	after = append(after, 0x82, 127, 0, 0, 0, 0, 0, byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload)))
	after = append(after, payload...)
	after = append(after, 0x88, 2, 0x03, 0xe8)
	addr, _ := testNode(t, func(c net.Conn) {
		_, _ = c.Write(append([]byte(testAnswer("")), after...))
		_ = c.(*net.TCPConn).CloseWrite()
	})
	p, n := testPool(t, addr, 5*time.Second)
	var up NodeConn
	resp, err := DialNode(p, n, testRequest, AppendAccept(nil, []byte(testKey)), &up, nil, true, nil)
	if err != nil || resp != nil {
		t.Fatalf("DialNode: %v, %v", resp, err)
	}
	if _, ok := up.Conn.(*tunnel.NodeSocket); !ok {
		t.Fatalf("node connection %T, want a NodeSocket", up.Conn)
	}
	time.Sleep(50 * time.Millisecond) // the rest and the FIN reach the NodeSocket's poller
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cln.Close()
	client, err := net.Dial("tcp", cln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	gw, err := cln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	tun := tunnel.New(tunnel.Params{Client: gw, Node: up.Conn, NodePending: up.Pending, CloseTimeout: 200 * time.Millisecond, Lease: nopLease{}})
	tun.Start()
	if tun.Engine() != "epoll" {
		t.Fatalf("engine %s", tun.Engine())
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(after))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("client read: %v", err)
	}
	if !bytes.Equal(got, after) {
		t.Fatal("client got other bytes than the node sent after its 101")
	}
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("tunnel did not end")
	}
}

// nopLease is a lease that holds nothing.
type nopLease struct{}

// Release does nothing.
func (nopLease) Release() {}

// TestDialNodeClientGoneSendsNothing pins the last check of a handshake
// whose client went away (its HTTP/2 stream reset) while the node was
// dialed: the connection is closed before a byte of the request is
// written, and DialNode says ErrClientGone. Before, the request went out
// and the node completed a handshake nobody would use.
func TestDialNodeClientGoneSendsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.Copy(io.Discard, c) // until the gateway's close
		got <- int(n)
	}()
	p, n := testPool(t, ln.Addr().String(), 5*time.Second)
	var up NodeConn
	asked := 0
	_, err = DialNode(p, n, testRequest, AppendAccept(nil, []byte(testKey)), &up, nil, false, func() bool { asked++; return true })
	if !errors.Is(err, ErrClientGone) || asked != 1 {
		t.Fatalf("DialNode for a client gone: %v (gone asked %d times); want ErrClientGone", err, asked)
	}
	if n := <-got; n != 0 {
		t.Fatalf("the node got %d bytes of a request whose client was gone", n)
	}
}
