package upgrade

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// socketPool returns a pool of one node at addr, without TLS.
func socketPool(t *testing.T, addr string) *upstream.Pool {
	t.Helper()
	cfg, err := conf.Parse("p.toml", []byte(fmt.Sprintf(`
[[routes]]
pool = "relay"
[[pools]]
name = "relay"
connect_timeout = "2s"
  [[pools.nodes]]
  addr = %q
`, addr)))
	if err != nil {
		t.Fatal(err)
	}
	p, _, _, err := upstream.NewPool(&cfg.Pools[0], nil, nil, balancer.NewRegistry(), slog.New(slog.DiscardHandler), nil,
		func(int, int) upstream.Admission { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Health.Stop)
	return p
}

// TestDialNodeSocketAnswerWithFrames: a node that sends its 101, a
// frame far larger than the answer's read buffer, a close frame and its
// FIN in one write, before the tunnel exists. The handshake runs on a
// NodeSocket (whose reads took the edges), the tunnel takes the socket
// over, and the client gets every byte after the 101, then the node's
// end.
func TestDialNodeSocketAnswerWithFrames(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	key := []byte("dGhlIHNhbXBsZSBub25jZQ==")
	accept := AcceptKey(key)
	payload := bytes.Repeat([]byte("x"), 300<<10)
	var after []byte
	after = append(after, 0x82, 127, 0, 0, 0, 0, 0, byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload)))
	after = append(after, payload...)
	after = append(after, 0x88, 2, 0x03, 0xe8)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		all := append([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+accept+"\r\n\r\n"), after...)
		_, _ = c.Write(all)
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	}()
	p := socketPool(t, ln.Addr().String())
	var up NodeConn
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + string(key) + "\r\nSec-WebSocket-Version: 13\r\n\r\n")
	resp, err := DialNode(p, p.Node(ln.Addr().String()), req, []byte(accept), &up, nil, true)
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

type nopLease struct{}

func (nopLease) Release() {}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

// TestDialNodeSocketFailuresLeaveNoDescriptor: every failed handshake on
// a NodeSocket (a refused connect, a 4xx, a 5xx, a silent node past
// connect_timeout, a wrong accept key) closes its socket.
func TestDialNodeSocketFailuresLeaveNoDescriptor(t *testing.T) {
	key := []byte("dGhlIHNhbXBsZSBub25jZQ==")
	accept := AcceptKey(key)
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + string(key) + "\r\nSec-WebSocket-Version: 13\r\n\r\n")
	// The pollers' own descriptors, opened by the first NodeSocket.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		addr := ln.Addr().String()
		_ = ln.Close()
		p := socketPool(t, addr)
		_, _ = DialNode(p, p.Node(addr), req, []byte(accept), new(NodeConn), nil, true)
	}
	for _, tc := range []struct {
		name   string
		answer string // "" : silent; "refuse": nothing listens
	}{
		{"refused", "refuse"},
		{"4xx", "HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno"},
		{"5xx", "HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"},
		{"wrong key", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAA\r\n\r\n"},
		{"silent", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			var served chan net.Conn
			if tc.answer == "refuse" {
				_ = ln.Close()
			} else {
				defer ln.Close()
				served = make(chan net.Conn, 1)
				go func() {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					served <- c
					buf := make([]byte, 4096)
					_, _ = c.Read(buf)
					if tc.answer != "" {
						_, _ = c.Write([]byte(tc.answer))
					}
				}()
			}
			p := socketPool(t, addr)
			p.ConnectTimeout = 300 * time.Millisecond
			before := openFDs(t)
			var up NodeConn
			resp, err := DialNode(p, p.Node(addr), req, []byte(accept), &up, nil, true)
			if resp != nil {
				fasthttp.ReleaseResponse(resp)
			} else if err == nil {
				t.Fatal("handshake succeeded")
			}
			if served != nil {
				c := <-served
				_ = c.Close()
				before++ // the node's end, closed just now
			}
			if n := openFDs(t); n > before-1 && served != nil || n > before && served == nil {
				t.Fatalf("%d descriptors open after the failed handshake, %d before (%v)", n, before, err)
			}
		})
	}
}

// TestDialNodeSocketTrickle: a node that sends its 101 a byte at a time
// completes the handshake on a NodeSocket within connect_timeout, and one
// that trickles past it is cut at connect_timeout.
func TestDialNodeSocketTrickle(t *testing.T) {
	key := []byte("dGhlIHNhbXBsZSBub25jZQ==")
	accept := AcceptKey(key)
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + string(key) + "\r\nSec-WebSocket-Version: 13\r\n\r\n")
	answer := []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n")
	for _, tc := range []struct {
		name  string
		every time.Duration
		ok    bool
	}{{"within", time.Millisecond, true}, {"past", 20 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				for i := range answer {
					if _, err := c.Write(answer[i : i+1]); err != nil {
						return
					}
					time.Sleep(tc.every)
				}
				_, _ = c.Read(buf)
			}()
			p := socketPool(t, ln.Addr().String())
			p.ConnectTimeout = time.Second
			var up NodeConn
			start := time.Now()
			_, err = DialNode(p, p.Node(ln.Addr().String()), req, []byte(accept), &up, nil, true)
			took := time.Since(start)
			if tc.ok != (err == nil) {
				t.Fatalf("handshake: %v after %v", err, took)
			}
			if err == nil {
				_ = up.Conn.Close()
			} else if took > 2*time.Second {
				t.Fatalf("cut after %v, connect_timeout 1s", took)
			}
		})
	}
}
