package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// What one HTTP/2 client connection can make the gateway hold or do,
// held to what an HTTP/1.1 connection can (the review of h2c).

// neverReader opens a TLS connection whose ALPN chose h2, grants the
// largest send windows (SETTINGS_INITIAL_WINDOW_SIZE and a connection
// WINDOW_UPDATE of 2^31-1, so flow control never holds the gateway back)
// and opens a WebSocket to path; it returns once the 200 came, and the
// client reads nothing more.
func neverReader(t *testing.T, srv *Server, f *tlsFiles, path string) {
	t.Helper()
	cfg := f.clientConfig("gw.test")
	cfg.NextProtos = []string{"h2"}
	tc, err := tls.Dial("tcp", srv.TLSAddr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	_ = fr.WriteWindowUpdate(0, 1<<31-1-65535)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: wsConnectBlock(path), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		fm, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := fm.(*http2.MetaHeadersFrame); ok {
			if s := h.PseudoValue("status"); s != "200" {
				t.Fatalf("status %s, want 200", s)
			}
			return
		}
	}
	t.Fatal("no answer in 100 frames")
}

// wsConnectBlock is the header block of an extended CONNECT to path.
func wsConnectBlock(path string) []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "CONNECT"}, {":protocol", "websocket"}, {":scheme", "https"},
		{":authority", "gw.test"}, {":path", path}, {"sec-websocket-version", "13"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	return hb.Bytes()
}

// flood has a peer in room send n messages of size bytes, reading what
// comes back.
func flood(t *testing.T, e *env, room string, n, size int) {
	t.Helper()
	floodFrom(t, e.mustDial(room), n, size)
}

// floodFrom has peer, a WebSocket through the gateway, send n messages of
// size bytes, reading what comes back; the test closes it at its end.
func floodFrom(t *testing.T, peer *websocket.Conn, n, size int) {
	t.Helper()
	t.Cleanup(func() { peer.Close() })
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := peer.ReadMessage(); err != nil {
				readErr <- err
				return
			}
		}
	}()
	msg := bytes.Repeat([]byte("m"), size)
	for i := range n {
		if err := peer.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			t.Fatalf("message %d: %v (read: %v)", i, err, <-readErr)
		}
	}
}

// TestClientH2ThatNeverReadsHoldsItsTunnelBack pins the bound on what the
// gateway takes from a node for an HTTP/2 client that does not read: as
// over HTTP/1.1, where the tunnel's write blocks once the socket buffers
// are full, the tunnel stops reading the node once the connection's write
// queue (h2serve's Server.WriteQueue) is full. Before, Stream.Write only
// queued: the tunnel read all 128 MiB a peer sent the room, and the
// gateway held it until write_timeout. The measure is the tunnel's bytes
// read from the node (the relays run in the test's process, so its heap
// says nothing of the gateway's).
func TestClientH2ThatNeverReadsHoldsItsTunnelBack(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig(`write_timeout = "60s"`, f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	neverReader(t, e.srv, f, "/room/never")
	flood(t, e, "/room/never", 256, 512<<10)
	// The relay may still be sending: wait for the bound to be passed,
	// a bounded while (a wait for the event, not a timing assertion).
	const bound = 32 << 20
	var got uint64
	for range 60 {
		if got = e.srv.tunnels.Totals().BytesToClient; got > bound {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the tunnel read %d MiB from the node for a client that reads nothing", got>>20)
	if got > bound {
		t.Fatalf("the gateway took %d MiB from the node for an HTTP/2 client that reads nothing", got>>20)
	}
}

// TestClientH2BodiesNotReadBeforeAdmission pins that a plain request's body is
// read only when the request is forwarded, as the node takes it: sixteen
// streams of one connection each send 4 MiB less 100 KiB to a route that
// refuses plain HTTP, and the gateway's heap grows by far less than the
// 62 MiB it took when each stream's body was read whole before admission
// (one TCP connection, one max_conns_per_ip place, held h2_max_streams
// times 4 MiB). Only the gateway and an idle recorder run in the process.
func TestClientH2BodiesNotReadBeforeAdmission(t *testing.T) {
	f := newTLSFiles(t)
	back := newRecorder(t)
	cfg := fmt.Sprintf(tlsGatewayConfig(`handshake_timeout = "60s"`, f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 16"), `
[[routes]]
path_prefix = "/ws/"
pool = "relay"
plain_http = "refuse"
`), "127.0.0.1:0", back.addr())
	srv := startGateway(t, cfg)
	hc := h2Dial(t, srv, f)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body := bytes.Repeat([]byte("b"), 4<<20-100<<10)
	var wg sync.WaitGroup
	for range 16 {
		s, err := hc.OpenRequest([]hpack.HeaderField{
			{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/ws/none"},
		}, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = s.Write(body) }() // returns once all but a window went, or the stream ended
	}
	wg.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d KiB", grew>>10)
	if grew > 24<<20 {
		t.Fatalf("one HTTP/2 connection made the gateway hold %d MiB of request bodies before admission", grew>>20)
	}
}

// TestClientH2RequestBodyForwarded pins the plain request's body streamed to
// the node: a POST's 200 KiB arrive whole, and a content-length over 4
// MiB (fasthttp's bound over HTTP/1.1) is answered 413 without a read.
func TestClientH2RequestBodyForwarded(t *testing.T) {
	f := newTLSFiles(t)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(node.Close)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll), "127.0.0.1:0", strings.TrimPrefix(node.URL, "http://"))
	srv := startGateway(t, cfg)
	hc := h2Dial(t, srv, f)
	post := func(h http.Header, body []byte) (int, []byte) {
		t.Helper()
		s, err := hc.OpenRequest([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/echo"}}, h, false)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = s.Write(body); _ = s.CloseWrite() }()
		st, _, _, err := s.Response(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if st == http.StatusOK {
			_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
			if got, err = io.ReadAll(s); err != nil {
				t.Fatal(err)
			}
		}
		return st, got
	}
	body := bytes.Repeat([]byte("p"), 200<<10)
	if st, got := post(nil, body); st != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("POST of %d bytes without a content-length: %d, %d bytes back", len(body), st, len(got))
	}
	if st, got := post(http.Header{"Content-Length": {fmt.Sprint(len(body))}}, body); st != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("POST of %d bytes with its content-length: %d, %d bytes back", len(body), st, len(got))
	}
	// A body announced over the bound, of which a byte is sent (and no
	// END_STREAM: ended there, it would be malformed, RFC 9113 section
	// 8.1.1, and reset PROTOCOL_ERROR).
	big, err := hc.OpenRequest([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/echo"}}, http.Header{"Content-Length": {"5000000"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = big.Write([]byte("x")) }()
	if st, _, _, err := big.Response(10 * time.Second); err != nil || st != http.StatusRequestEntityTooLarge {
		t.Fatalf("content-length 5000000: %d (%v), want 413", st, err)
	}
}

// TestClientH2MaxConnsPerIPCountsTunnels pins max_conns_per_ip over HTTP/2: a
// connection's place covers one WebSocket, and each further one takes a
// place of its own, so one client address holds as many tunnels as over
// HTTP/1.1 (there, one a connection). With max_conns_per_ip = 2, a
// connection opens two WebSockets, a third is answered 429, and once one
// closes another opens. Before, one connection held h2_max_streams.
func TestClientH2MaxConnsPerIPCountsTunnels(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("max_conns_per_ip = 2", f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 10"), catchAll))
	hc := h2Dial(t, e.srv, f)
	d := hc.Dialer(10 * time.Second)
	var open []*websocket.Conn
	for i := range 2 {
		c, _, err := d.Dial("ws://gw.test/room/ip", nil)
		if err != nil {
			t.Fatalf("WebSocket %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	c, resp, err := d.Dial("ws://gw.test/room/ip", nil)
	if err == nil {
		c.Close()
		t.Fatal("max_conns_per_ip = 2, yet one client address holds 3 tunnels over one HTTP/2 connection")
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third WebSocket: %v %v, want 429", resp, err)
	}
	if got := e.srv.metrics.HandshakeCounts()["ip_conns"]; got != 1 {
		t.Fatalf("wsgate_handshakes_total{result=\"ip_conns\"} = %d, want 1", got)
	}
	open[0].Close()
	waitUntil(t, func() bool {
		c, _, err := d.Dial("ws://gw.test/room/ip", nil)
		if err == nil {
			open = append(open, c)
		}
		return err == nil
	})
	for _, c := range open[1:] {
		c.Close()
	}
	waitUntil(t, func() bool { return len(e.srv.limits.ByIP()) <= 1 && e.srv.tunnels.Len() == 0 })
}

// TestClientH2DrainReachesConnectionBeforeItsPreface pins the drain's GOAWAY on
// a connection whose ALPN chose h2 but whose client preface had not come
// when Shutdown began: it gets GOAWAY and its WebSocket is not admitted.
// Before, h2serve's GoAway reached only connections being served, and
// this one was served as usual behind the drain.
func TestClientH2DrainReachesConnectionBeforeItsPreface(t *testing.T) {
	f := newTLSFiles(t)
	var logs lockedBuffer
	e := newEnvLog(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll), slog.New(slog.NewJSONHandler(&logs, nil)))
	cfg := f.clientConfig("gw.test")
	cfg.NextProtos = []string{"h2"}
	tc, err := tls.Dial("tcp", e.srv.TLSAddr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	done := make(chan error, 1)
	go func() { done <- e.srv.Shutdown(context.Background()) }()
	waitUntil(t, func() bool { return strings.Contains(logs.String(), `"msg":"draining"`) }) // logged after the GOAWAYs
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(tc, http2.ClientPreface)
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: wsConnectBlock("/room/late"), EndHeaders: true})
	goAway := false
	for range 100 {
		fm, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch fm := fm.(type) {
		case *http2.GoAwayFrame:
			goAway = true
		case *http2.MetaHeadersFrame:
			t.Fatalf("a stream opened after the drain began was answered %s", fm.PseudoValue("status"))
		}
	}
	if !goAway {
		t.Error("no GOAWAY on a connection that began during the drain")
	}
	tc.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestClientH2WriteTimeoutFollowsReload pins that a reload's write_timeout
// reaches client HTTP/2 connections served after it, while each tunnel
// keeps the one in force when it started: after a reload from 1h to 1s, a
// connection whose client stops reading is closed once its writes stop
// moving, which the old timeout could not do within the test. The peer
// that floods the room joins before the reload, so its own tunnel keeps
// 1h: a relay that takes no byte of its writes for a second (as under
// -race on a loaded machine) does not end it, as it did when the peer
// joined after the reload and the flood failed with "close sent".
func TestClientH2WriteTimeoutFollowsReload(t *testing.T) {
	f := newTLSFiles(t)
	tlsAddr := testproc.FreeAddr(t)
	cfgFmt := tlsGatewayConfig("%[3]s", f.table(tlsAddr, "  h2 = true"), catchAll)
	e := newEnv(t, 1, strings.Replace(cfgFmt, "%[3]s", `write_timeout = "1h"`, 1))
	peer := e.mustDial("/room/wt")
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(cfgFmt, e.gw, e.addrs[0], `write_timeout = "1s"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	neverReader(t, e.srv, f, "/room/wt")
	floodFrom(t, peer, 64, 512<<10)
	waitUntil(t, func() bool { return e.srv.h2.Stats().Conns == 0 })
}
