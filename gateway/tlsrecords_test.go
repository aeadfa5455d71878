package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
)

// rawWSS is a wss client whose TCP socket the test can write to under
// its TLS connection (records of its own making).
type rawWSS struct {
	ws   *websocket.Conn
	tcp  net.Conn
	flip *flipConn // tcp, under tls
	tls  *tls.Conn
}

// dialRawWSS opens a WebSocket through the TLS listener at addr with cfg,
// keeping the client's socket and TLS connection.
func dialRawWSS(t *testing.T, addr, path string, cfg *tls.Config) *rawWSS {
	t.Helper()
	r := &rawWSS{}
	d := websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		NetDialTLSContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			r.flip = &flipConn{Conn: c}
			tc := tls.Client(r.flip, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			r.tcp, r.tls = c, tc
			return tc, nil
		},
	}
	ws, _, err := d.Dial("wss://"+addr+path, nil)
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	r.ws = ws
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := ws.ReadMessage(); err != nil { // hello
		t.Fatalf("hello: %v", err)
	}
	return r
}

// swapMB has a send size bytes to b in messages of 256 KB, and b the
// same to a, and checks what each got.
func swapMB(t *testing.T, a, b *websocket.Conn, size int) {
	t.Helper()
	const msg = 256 << 10
	for _, dir := range [][2]*websocket.Conn{{a, b}, {b, a}} {
		from, to := dir[0], dir[1]
		errc := make(chan error, 1)
		go func() {
			for i := 0; i < size; i += msg {
				p := bytes.Repeat([]byte{byte('a' + i/msg%26)}, msg)
				if err := from.WriteMessage(websocket.BinaryMessage, p); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for i := 0; i < size; i += msg {
			_ = to.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, p, err := to.ReadMessage()
			if err != nil {
				t.Fatalf("message %d: %v", i/msg, err)
			}
			if len(p) != msg || p[0] != byte('a'+i/msg%26) || p[msg-1] != p[0] {
				t.Fatalf("message %d: %d bytes, first %q", i/msg, len(p), p[0])
			}
		}
		if err := <-errc; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

// TestWSSTunnelsOnPollers pins issue 32 item 1: a TLS 1.3 client's tunnel
// runs on the pollers (counted as epoll-tls, its handshake as the
// gateway's records), carries 1 MB each way with Go's crypto/tls client at
// the other end, and a drain closes it with 1001; a TLS 1.2 client's
// tunnel still runs on goroutines, counted, and carries frames too.
func TestWSSTunnelsOnPollers(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()
	m := e.srv.metrics
	polled0 := counterValue(t, m.StartedOn["epoll-tls"])
	goroutines0 := counterValue(t, m.StartedOn["goroutines"])
	taken0 := counterValue(t, m.TLSRecords.WithLabelValues("wsgate", "tls13"))
	kept0 := counterValue(t, m.TLSRecords.WithLabelValues("crypto_tls", "tls12"))

	a := dialRawWSS(t, addr, "/room/poll?hello=1", f.clientConfig("gw.test"))
	b := dialRawWSS(t, addr, "/room/poll?hello=1", f.clientConfig("gw.test"))
	if got := counterValue(t, m.StartedOn["epoll-tls"]) - polled0; got != 2 {
		t.Fatalf("wsgate_tunnels_started_total{engine=epoll-tls} rose by %v, want 2", got)
	}
	if got := counterValue(t, m.TLSRecords.WithLabelValues("wsgate", "tls13")) - taken0; got != 2 {
		t.Fatalf("wsgate_tls_records_total{layer=wsgate} rose by %v, want 2", got)
	}
	swapMB(t, a.ws, b.ws, 1<<20)

	old := f.clientConfig("gw.test")
	old.MaxVersion = tls.VersionTLS12
	c := dialRawWSS(t, addr, "/room/poll?hello=1", old)
	if got := c.tls.ConnectionState().Version; got != tls.VersionTLS12 {
		t.Fatalf("negotiated %s", tls.VersionName(got))
	}
	if got := counterValue(t, m.StartedOn["goroutines"]) - goroutines0; got != 1 {
		t.Fatalf("wsgate_tunnels_started_total{engine=goroutines} rose by %v, want 1 (the TLS 1.2 client's)", got)
	}
	if got := counterValue(t, m.TLSRecords.WithLabelValues("crypto_tls", "tls12")) - kept0; got != 1 {
		t.Fatalf("wsgate_tls_records_total{layer=crypto_tls,reason=tls12} rose by %v, want 1", got)
	}
	swapMB(t, a.ws, c.ws, 256<<10)

	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*rawWSS{a, b, c} {
		_ = r.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, _, err := r.ws.ReadMessage()
			if err == nil {
				continue // the other clients' frames
			}
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("client %d: %v, want close 1001", i, err)
			}
			break
		}
	}
	e.waitZero()
}

// TestWSSBadRecordsCloseOneClient pins what the poller does with records
// that fail: a client that sends a record that does not authenticate
// (garbage under a valid header, or a real record with a bit flipped) gets
// bad_record_mac and its connection ends, while another client's tunnel on
// the same gateway goes on; one that sends a record over 2^14+256 bytes
// gets record_overflow.
func TestWSSBadRecordsCloseOneClient(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()
	good := dialRawWSS(t, addr, "/room/bad?hello=1", f.clientConfig("gw.test"))
	peer := dialRawWSS(t, addr, "/room/bad?hello=1", f.clientConfig("gw.test"))

	for _, tc := range []struct {
		name   string
		record func(r *rawWSS) []byte
		alert  string
	}{
		{"garbage", func(*rawWSS) []byte {
			return append([]byte{23, 3, 3, 0, 40}, bytes.Repeat([]byte{0x5a}, 40)...)
		}, "bad record MAC"},
		{"flipped bit", func(r *rawWSS) []byte {
			// A record crypto/tls seals, its tag altered on the way.
			r.flip.flip.Store(true)
			if err := r.ws.WriteMessage(websocket.TextMessage, []byte("flipped")); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "bad record MAC"},
		{"overflow", func(*rawWSS) []byte {
			return append([]byte{23, 3, 3, 0x41, 0x01}, make([]byte, 100)...)
		}, "record overflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := dialRawWSS(t, addr, "/room/bad?hello=1", f.clientConfig("gw.test"))
			if rec := tc.record(bad); rec != nil {
				if _, err := bad.tcp.Write(rec); err != nil {
					t.Fatal(err)
				}
			}
			_ = bad.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			var err error
			for err == nil {
				_, _, err = bad.ws.ReadMessage()
			}
			if !strings.Contains(err.Error(), tc.alert) {
				t.Errorf("the bad client's read: %v, want the alert %q", err, tc.alert)
			}
			swapMB(t, good.ws, peer.ws, 256<<10)
		})
	}
	good.ws.Close()
	peer.ws.Close()
	e.waitZero()
}

// flipConn is a client's socket that flips the last bit of its next write
// once asked to: the tag of the record crypto/tls writes.
type flipConn struct {
	net.Conn
	flip atomic.Bool
}

func (c *flipConn) Write(b []byte) (int, error) {
	if c.flip.CompareAndSwap(true, false) {
		b = bytes.Clone(b)
		b[len(b)-1] ^= 1
	}
	return c.Conn.Write(b)
}

// TestWSSCloseNotify pins a client that ends its stream with close_notify
// (and no close frame): its tunnel ends as for a client that hung up, the
// node's connection is closed, every count returns to zero, and the
// client reads the gateway's close_notify (a clean end of stream).
func TestWSSCloseNotify(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()
	c := dialRawWSS(t, addr, "/room/notify?hello=1", f.clientConfig("gw.test"))
	if err := c.tls.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.tls.SetReadDeadline(time.Now().Add(10 * time.Second))
	var err error
	for err == nil {
		_, err = c.tls.Read(make([]byte, 1024))
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("after close_notify the client read %v, want the gateway's close_notify (io.EOF)", err)
	}
	e.waitZero()
}

// TestWSSOpenSSLClient runs a WebSocket from `openssl s_client -tls1_3`
// through the TLS listener, one cipher suite at a time, so the poller's
// records meet a TLS stack other than Go's in each suite: the upgrade, a
// frame each way with a Go wss client in the same room, then s_client's
// "K" (a KeyUpdate with update_requested: the gateway rotates its read
// key, and seals its own KeyUpdate before its next record), and a frame
// each way again under the new keys. It is skipped without openssl.
func TestWSSOpenSSLClient(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl")
	}
	f := newTLSFiles(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, f.ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()
	polled0 := counterValue(t, e.srv.metrics.StartedOn["epoll-tls"])
	for i, suite := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256} {
		name := tls.CipherSuiteName(suite)
		t.Run(name, func(t *testing.T) {
			room := "/room/ossl" + strconv.Itoa(i) + "?hello=1"
			peer := dialRawWSS(t, addr, room, f.clientConfig("gw.test"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "s_client", "-connect", addr, "-tls1_3", "-ciphersuites", name,
				"-servername", "gw.test", "-CAfile", caFile, "-verify_return_error")
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			stderr, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cancel()
			out := newStreamWatch(stdout)
			errs := newStreamWatch(stderr)
			say := func(b []byte) {
				t.Helper()
				if _, err := stdin.Write(b); err != nil {
					t.Fatal(err)
				}
			}
			say([]byte("GET " + room + " HTTP/1.1\r\nHost: gw.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
			out.wait(t, "HTTP/1.1 101")
			exchangeOpenSSL := func(tag string) {
				t.Helper()
				msg := "from openssl " + tag
				// A masked text frame with a zero mask key: the
				// payload goes as it is.
				say(append([]byte{0x81, 0x80 | byte(len(msg)), 0, 0, 0, 0}, msg...))
				_ = peer.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
				for {
					_, p, err := peer.ws.ReadMessage()
					if err != nil {
						t.Fatalf("peer: %v", err)
					}
					if string(p) == msg {
						break
					}
				}
				back := "to openssl " + tag
				if err := peer.ws.WriteMessage(websocket.TextMessage, []byte(back)); err != nil {
					t.Fatal(err)
				}
				out.wait(t, back)
			}
			exchangeOpenSSL("before")
			say([]byte("K\n"))
			errs.wait(t, "KEYUPDATE")
			exchangeOpenSSL("after the KeyUpdate")
		})
	}
	if got := counterValue(t, e.srv.metrics.StartedOn["epoll-tls"]) - polled0; got != 6 {
		t.Errorf("wsgate_tunnels_started_total{engine=epoll-tls} rose by %v, want 6 (s_client's and its peer's, three times)", got)
	}
}

// streamWatch collects what a reader gives, for waits on a text in it.
type streamWatch struct {
	mu   sync.Mutex
	buf  []byte
	more chan struct{}
}

func newStreamWatch(r io.Reader) *streamWatch {
	w := &streamWatch{more: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			w.mu.Lock()
			w.buf = append(w.buf, b[:n]...)
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return w
}

// wait waits up to 10 s for s to appear in what came.
func (w *streamWatch) wait(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		w.mu.Lock()
		found := bytes.Contains(w.buf, []byte(s))
		got := string(w.buf)
		w.mu.Unlock()
		if found {
			return
		}
		select {
		case <-w.more:
		case <-deadline:
			t.Fatalf("no %q in:\n%s", s, got)
		}
	}
}

// TestWSSToH2Pool pins a TLS 1.3 client's tunnel to a node of an "h2"
// pool: a stream of the node's HTTP/2 connection, run on the poller that
// reads that connection, with the client's records: it counts as
// epoll-tls and carries 256 KB each way.
func TestWSSToH2Pool(t *testing.T) {
	f := newTLSFiles(t)
	cfg := strings.Replace(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll),
		"name = \"relay\"\n", "name = \"relay\"\nprotocol = \"h2\"\nh2_connections = 1\n", 1)
	e := newEnv(t, 1, cfg)
	addr := e.srv.TLSAddr().String()
	polled0 := counterValue(t, e.srv.metrics.StartedOn["epoll-tls"])
	a := dialRawWSS(t, addr, "/room/h2pool?hello=1", f.clientConfig("gw.test"))
	b := dialRawWSS(t, addr, "/room/h2pool?hello=1", f.clientConfig("gw.test"))
	if got := counterValue(t, e.srv.metrics.StartedOn["epoll-tls"]) - polled0; got != 2 {
		t.Fatalf("wsgate_tunnels_started_total{engine=epoll-tls} rose by %v, want 2", got)
	}
	swapMB(t, a.ws, b.ws, 256<<10)
	a.ws.Close()
	b.ws.Close()
	e.waitZero()
}
