package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// What a client's HTTP/2 streams may make the gateway hold beside its
// connection: slots, node connections, node handshakes.

// TestClientH2StreamsHoldMaxConnsSlots pins that an HTTP/2 connection's
// streams count against max_conns as connections do: with max_conns = 4,
// one connection opens four WebSockets (its slot covers the first, each
// further one takes one of its own), the fifth WebSocket and a plain
// request beside them are answered 503 (result max_conns), a new
// HTTP/1.1 connection finds the gateway full, and once one WebSocket ends
// its slot takes another. Every slot comes back at the end. Before, the
// connection held one slot whatever it carried, and each WebSocket a
// node socket: a few connections of h2_max_streams streams ran the
// process out of descriptors.
func TestClientH2StreamsHoldMaxConnsSlots(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("max_conns = 4", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	hc := h2Dial(t, e.srv, f)
	d := hc.Dialer(10 * time.Second)
	var open []*websocket.Conn
	for i := range 4 {
		c, _, err := d.Dial("ws://gw.test/room/slots", nil)
		if err != nil {
			t.Fatalf("WebSocket %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	if n := e.srv.limits.Open(); n != 4 {
		t.Fatalf("one connection with 4 WebSockets holds %d slots, want 4", n)
	}
	c, resp, err := d.Dial("ws://gw.test/room/slots", nil)
	if err == nil {
		c.Close()
		t.Fatal("max_conns = 4, yet one HTTP/2 connection holds 5 tunnels")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fifth WebSocket: %v %+v, want 503 with Retry-After", err, resp)
	}
	s, err := hc.OpenRequest([]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/info"}}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _, err := s.Response(10 * time.Second); err != nil || st != http.StatusServiceUnavailable {
		t.Fatalf("a plain request beside 4 tunnels: %d %v, want 503", st, err)
	}
	if got := e.srv.metrics.HandshakeCounts()["max_conns"]; got != 2 {
		t.Fatalf("wsgate_handshakes_total{result=\"max_conns\"} = %d, want 2", got)
	}
	if _, _, err := websocket.DefaultDialer.Dial("ws://"+e.srv.Addr().String()+"/room/slots", nil); err == nil {
		t.Fatal("an HTTP/1.1 WebSocket got in past max_conns = 4")
	}
	open[0].Close()
	waitUntil(t, func() bool {
		c, _, err := d.Dial("ws://gw.test/room/slots", nil)
		if err == nil {
			open = append(open, c)
		}
		return err == nil
	})
	for _, c := range open[1:] {
		c.Close()
	}
	hc.Close()
	waitH2Zero(t, e.srv)
	e.waitZero()
	waitUntil(t, func() bool { return e.srv.limits.Open() == 0 && len(e.srv.limits.ByIP()) == 0 })
}

// goroutinesIn counts the goroutines whose stack holds one of frames.
func goroutinesIn(frames ...string) int {
	buf := make([]byte, 16<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		for _, f := range frames {
			if strings.Contains(g, f) {
				n++
				break
			}
		}
	}
	return n
}

// TestClientH2SlowBodiesDoNotStarveNodePool pins that a plain request's body
// over HTTP/2 costs its sender, not the node's connection pool: 6
// connections open 100 POST streams each, every one announcing 100 KB and
// sending 1 byte; meanwhile another client's 20 GETs are all answered
// 200, and no POST reaches the node. Before, each stream's body was
// streamed to the node, so the 600 streams held the node's 512 pooled
// connections for handshake_timeout and the GETs were answered 502.
func TestClientH2SlowBodiesDoNotStarveNodePool(t *testing.T) {
	var posts atomic.Int64
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(node.Close)
	f := newTLSFiles(t)
	cfg := fmt.Sprintf(tlsGatewayConfig(`handshake_timeout = "60s"`, f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll),
		"127.0.0.1:0", strings.TrimPrefix(node.URL, "http://"))
	srv := startGateway(t, cfg)
	const conns, streams = 6, 100
	var attackers []*h2client.Conn
	for range conns {
		hc := h2Dial(t, srv, f)
		attackers = append(attackers, hc)
		for range streams {
			s, err := hc.OpenRequest([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
				{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/upload"}}, http.Header{"Content-Length": {"100000"}}, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The streams are admitted and wait where they wait: reading their
	// bodies in the gateway, or (before) sending them to the node.
	waiting := func() int { return goroutinesIn("gateway.readStreamedBody(", "fasthttp.(*HostClient)") }
	deadline := time.Now().Add(20 * time.Second)
	for waiting() < 500 { // the node pool holds 512
		if time.Now().After(deadline) {
			t.Fatalf("%d streams wait for their bodies; HTTP/2 %+v", waiting(), srv.h2.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	ok := 0
	for i := range 20 {
		resp, err := client.Get("http://" + srv.Addr().String() + "/info")
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			ok++
		}
	}
	if ok != 20 || posts.Load() != 0 {
		t.Fatalf("%d of 20 GETs answered 200 while %d slow bodies were sent; %d POSTs reached the node, want 0", ok, conns*streams, posts.Load())
	}
	client.CloseIdleConnections()
	for _, hc := range attackers {
		hc.Close()
	}
	waitH2Zero(t, srv)
	waitUntil(t, func() bool { return srv.limits.Open() == 0 && len(srv.limits.ByIP()) == 0 })
}

// TestClientH2ResetStreamsNeverReachNodes pins rapid reset against the
// nodes: 3 connections open 400 WebSocket streams each and reset each at
// once; the node (which counts its upgrades) sees far fewer handshakes
// than streams were admitted, since a stream reset while it is admitted
// stops before its node is picked. Before, every admitted stream
// completed its node handshake (a relay join) and only then found its
// client gone.
func TestClientH2ResetStreamsNeverReachNodes(t *testing.T) {
	var upgrades atomic.Int64
	up := websocket.Upgrader{}
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		upgrades.Add(1)
		_, _, _ = c.ReadMessage()
		c.Close()
	}))
	t.Cleanup(node.Close)
	f := newTLSFiles(t)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll),
		"127.0.0.1:0", strings.TrimPrefix(node.URL, "http://"))
	srv := startGateway(t, cfg)
	pseudo := []hpack.HeaderField{{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: "websocket"},
		{Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/room/reset"}}
	const conns, burst = 3, 400
	var wg sync.WaitGroup
	for range conns {
		hc := h2Dial(t, srv, f)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range burst {
				s, err := hc.OpenRequest(pseudo, http.Header{"Sec-Websocket-Version": {"13"}}, false)
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Abort(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for st := srv.h2.Stats(); st.Opened+st.Refused < conns*burst || st.Streams != 0; st = srv.h2.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("HTTP/2 %+v after the bursts", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := srv.h2.Stats()
	t.Logf("streams admitted %d, refused %d; node handshakes %d", st.Opened, st.Refused, upgrades.Load())
	if n := upgrades.Load(); n*10 > int64(st.Opened) {
		t.Fatalf("%d reset streams admitted made %d node handshakes", st.Opened, n)
	}
	waitUntil(t, func() bool { return srv.tunnels.Len() == 0 && srv.limits.Open() == int64(conns) })
}

// TestClientH2CutStreamTakesNoLinger pins that a WebSocket stream the
// gateway cuts (a frame over max_frame) ends without lingering: its close
// is a frame on a connection that stays open, which resets nothing, so it
// takes none of the process's 1,024 linger places, nor a goroutine until
// the close deadline. Before, it lingered as a cut TCP client does.
func TestClientH2CutStreamTakesNoLinger(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"),
		"[[routes]]\npath_prefix = \"/\"\npool = \"relay\"\nmax_frame = \"1KiB\"\n"))
	base := goroutinesIn("tunnel.linger(")
	hc := h2Dial(t, e.srv, f)
	c, _, err := hc.Dialer(10*time.Second).Dial("ws://gw.test/room/cut?hello=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); err != nil { // the relay's hello
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
		t.Fatalf("want close 1009, got %v", err)
	}
	// The client keeps its stream open: a lingering one would wait for
	// it until the close deadline.
	waitUntil(t, func() bool { return e.srv.Tunnels() == 0 })
	if n := goroutinesIn("tunnel.linger(") - base; n != 0 {
		t.Fatalf("%d cut HTTP/2 streams linger, want 0", n)
	}
	c.Close()
	hc.Close()
	waitH2Zero(t, e.srv)
	e.waitZero()
}

// TestClientH2ResetMidOpenEndsNodeStream pins that a client's stream reset
// while its stream to a node of an h2 pool is being opened ends that open:
// the node, which has not answered, sees its stream ended (END_STREAM, then
// RST_STREAM once it stays), the gateway counts the refusal client_gone,
// not a node failure, and holds no node stream after. Before, the open
// waited for the node's answer until connect_timeout (60 s here) although
// the client was gone.
func TestClientH2ResetMidOpenEndsNodeStream(t *testing.T) {
	asked := make(chan uint32, 1)
	ended := make(chan uint32, 4)
	addr := scriptedNode{
		onStream: func(n *nodeConn, id uint32) bool {
			asked <- id // and never answers
			return false
		},
		seen: func(f http2.Frame) {
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				ended <- f.StreamID
			case *http2.DataFrame:
				if f.StreamEnded() {
					ended <- f.StreamID
				}
			}
		},
	}.start(t)
	f := newTLSFiles(t)
	cfg := strings.Replace(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll),
		"name = \"relay\"\n", "name = \"relay\"\nprotocol = \"h2\"\nh2_connections = 1\nconnect_timeout = \"60s\"\n", 1)
	// The node stream closed, which the node never ends, is reset after
	// write_timeout.
	cfg = strings.Replace(cfg, "drain_timeout = \"5s\"\n", "drain_timeout = \"5s\"\nwrite_timeout = \"1s\"\n", 1)
	srv := startGateway(t, fmt.Sprintf(cfg, "127.0.0.1:0", addr))
	hc := h2Dial(t, srv, f)
	pseudo := []hpack.HeaderField{{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: "websocket"},
		{Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/room/slow"}}
	s, err := hc.OpenRequest(pseudo, http.Header{"Sec-Websocket-Version": {"13"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	var id uint32
	select {
	case id = <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the node never got the stream")
	}
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ended:
		if got != id {
			t.Fatalf("the node saw stream %d ended, want %d", got, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the node's stream was not ended after its client reset it (connect_timeout is 60s)")
	}
	waitUntil(t, func() bool { return srv.metrics.HandshakeCounts()["client_gone"] == 1 })
	if got := srv.metrics.HandshakeCounts()["upstream_error"]; got != 0 {
		t.Fatalf("upstream_error = %d, want 0: the client's reset is not the node's failure", got)
	}
	p := srv.current().pools["relay"]
	set := p.H2[p.Node(addr)]
	waitUntil(t, func() bool { return set.Stats().Streams == 0 })
	hc.Close()
	waitH2Zero(t, srv)
}
