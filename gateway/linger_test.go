package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/testproc"
)

// lingering reports how many goroutines are in upgrade.LingerClose.
func lingering() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("upgrade.LingerClose("))
}

// TestOverflowLingerBounded pins issue 9 item 7: a close-1013 overflow
// connection whose client never closes lingered forever (Detach cleared
// its deadline), keeping a goroutine and a socket that no limit counted.
// Now it holds a connection slot while it lingers and is gone after
// handshake_timeout.
func TestOverflowLingerBounded(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith(`handshake_timeout = "3s"`, "max_conns_per_node = 1", `
[[routes]]
pool = "relay"
overflow = "close-1013"
`))
	held := e.mustDial("/room/x") // the node is full
	defer held.Close()
	base := lingering()

	c, err := net.Dial("tcp", e.gw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /room/y HTTP/1.1\r\nHost: gw\r\n"+wsHeaders+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("want 101 then 1013: %v %v", err, resp)
	}
	frame := make([]byte, 4)
	if _, err := io.ReadFull(br, frame); err != nil || frame[0] != 0x88 || frame[2] != 0x03 || frame[3] != 0xf5 {
		t.Fatalf("want a close frame with 1013: % x %v", frame, err)
	}
	// The client neither answers nor closes. While the gateway lingers,
	// the socket holds a slot beside the tunnel's.
	if open := e.srv.limits.Open(); open != 2 {
		t.Fatalf("open slots while lingering = %d, want 2 (tunnel + lingering socket)", open)
	}
	waitUntil(t, func() bool { return e.srv.limits.Open() == 1 && lingering() == base })
	held.Close()
	e.waitZero()
}

// TestDetachUnwrapsHijackedConn pins issue 9 item 7: the tunnel takes the
// raw socket from fasthttp's hijacked connection through its unexported
// UnsafeConn method. Should fasthttp drop it, upgrade.Detach would hand every
// tunnel fasthttp's wrapper (and its buffers) without a word; this test
// fails then. It runs the gateway's own fasthttp server, with a handler
// that hijacks and detaches, and checks upgrade.Detach returns the socket the
// listener accepted (a *edge.CountedConn around the *net.TCPConn) with the
// bytes the client sent right behind its request. On the TLS listener it
// must return the *tls.Conn over that socket (wrapped in a
// tunnel.TLSSocket), never the socket itself, whose bytes are ciphertext.
func TestDetachUnwrapsHijackedConn(t *testing.T) {
	f := newTLSFiles(t)
	cfg, err := conf.Parse("detach.toml", []byte(fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll), "127.0.0.1:0", "127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		raw  net.Conn
		rest []byte
	}
	got := make(chan result, 1)
	srv.http.Handler = func(ctx *fasthttp.RequestCtx) {
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			raw, pending := upgrade.Detach(c)
			// The request's tail is in pending, or still in the socket if
			// it arrived late.
			rest := append([]byte(nil), pending...)
			_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
			for len(rest) < len("tail!") {
				var b [16]byte
				n, err := raw.Read(b[:])
				rest = append(rest, b[:n]...)
				if err != nil {
					break
				}
			}
			got <- result{raw, rest}
		})
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	for _, secure := range []bool{false, true} {
		var c net.Conn
		if secure {
			c, err = tls.Dial("tcp", srv.TLSAddr().String(), f.clientConfig("gw.test"))
		} else {
			c, err = net.Dial("tcp", srv.Addr().String())
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: gw\r\n\r\ntail!"); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			defer r.raw.Close()
			// The listener's counted socket is what fasthttp wraps: Detach
			// must hand that back (or the TLS connection over it), not
			// fasthttp's wrapper.
			sock := r.raw
			if secure {
				// The listener's TLS connection: a *tls.Conn, or the
				// edge's wrapper of one.
				tc, ok := r.raw.(interface {
					ConnectionState() tls.ConnectionState
					NetConn() net.Conn
				})
				if !ok {
					t.Fatalf("TLS: Detach returned %T, want the listener's TLS connection", r.raw)
				}
				ts, ok := tc.NetConn().(*tunnel.TLSSocket)
				if !ok {
					t.Fatalf("TLS: the TLS connection is over %T, want the listener's *tunnel.TLSSocket", tc.NetConn())
				}
				sock = ts.Conn
			}
			if _, ok := sock.(*edge.CountedConn); !ok {
				t.Fatalf("TLS %t: Detach returned %T over %T, want the listener's *edge.CountedConn: fasthttp's hijacked connection no longer exposes UnsafeConn", secure, r.raw, sock)
			}
			if string(r.rest) != "tail!" {
				t.Fatalf("TLS %t: bytes behind the request = %q, want %q", secure, r.rest, "tail!")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("TLS %t: the hijack handler never ran", secure)
		}
	}
}
