package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// dialH2 opens an HTTP/2 connection to s, closed at the end of the test.
func dialH2(t *testing.T, s *server) *h2client.Conn {
	t.Helper()
	c, err := h2client.Dial(s.addr, ioTimeout)
	if err != nil {
		t.Fatalf("h2 dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// joinH2 joins room as a member carried by a stream of hc, with hello
// (whose frame it reads and returns) and subprotocols as given.
func joinH2(t *testing.T, hc *h2client.Conn, room string, hello bool, protocols ...string) (*websocket.Conn, []byte) {
	t.Helper()
	d := hc.Dialer(ioTimeout)
	d.Subprotocols = protocols
	u := "ws://relay/room/" + room
	if hello {
		u += "?hello=1"
	}
	c, resp, err := d.Dial(u, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("h2 join %s: %v (status %d)", u, err, status)
	}
	t.Cleanup(func() { _ = c.Close() })
	if !hello {
		return c, nil
	}
	_, b := read(t, c)
	return c, b
}

// TestH2Members pins issue 21 item 5: members that came over HTTP/2, two
// of them as streams of one connection, and one that came over HTTP/1.1
// share a room, every message reaching the other two both ways; the
// server advertises extended CONNECT; relay.v1 is negotiated over a
// stream as over an upgrade.
func TestH2Members(t *testing.T) {
	s := startRelay(t, relay.Options{})
	hc := dialH2(t, s)
	if v := hc.Settings()[http2.SettingEnableConnectProtocol]; v != 1 {
		t.Fatalf("SETTINGS_ENABLE_CONNECT_PROTOCOL = %d, want 1", v)
	}
	if v := hc.Settings()[http2.SettingMaxConcurrentStreams]; v != relay.DefaultH2MaxStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", v, relay.DefaultH2MaxStreams)
	}
	a, ha := joinH2(t, hc, "mixed", true)
	b, hb := joinH2(t, hc, "mixed", true)
	h1, _ := dial(t, s, "mixed", true)
	for _, h := range [][]byte{ha, hb} {
		if !strings.Contains(string(h), `"type":"hello"`) || !strings.Contains(string(h), `"room":"mixed"`) {
			t.Fatalf("hello over h2 = %s", h)
		}
	}
	members := map[string]*websocket.Conn{"h2-a": a, "h2-b": b, "h1": h1}
	for from, c := range members {
		send(t, c, websocket.TextMessage, []byte("from "+from))
		for to, o := range members {
			if to == from {
				continue
			}
			if typ, got := read(t, o); typ != websocket.TextMessage || string(got) != "from "+from {
				t.Fatalf("%s got %d %q, want the text from %s", to, typ, got, from)
			}
		}
	}
	send(t, a, websocket.BinaryMessage, []byte{0, 1, 2})
	for _, o := range []*websocket.Conn{b, h1} {
		if typ, got := read(t, o); typ != websocket.BinaryMessage || string(got) != "\x00\x01\x02" {
			t.Fatalf("binary message arrived as %d %q", typ, got)
		}
	}
	if n := s.Info().Connections; n != 3 {
		t.Fatalf("connections = %d, want 3", n)
	}

	v1, _ := joinH2(t, hc, "mixed", false, relayclient.Subprotocol)
	if v1.Subprotocol() != relayclient.Subprotocol {
		t.Fatalf("subprotocol over h2 = %q", v1.Subprotocol())
	}
	rc := relayclient.New(v1, relayclient.Since{})
	fs := joinV1(t, rc)
	if fs[0].Kind != relayclient.KindPos {
		t.Fatalf("first relay.v1 frame %s", fs[0].Kind)
	}
	if err := rc.Send(websocket.TextMessage, []byte("v1 says")); err != nil {
		t.Fatal(err)
	}
	if f := next(t, rc); f.Kind != relayclient.KindAck {
		t.Fatalf("after a send: %s, want ACK", f.Kind)
	}
	for _, o := range []*websocket.Conn{a, b, h1} {
		if _, got := read(t, o); string(got) != "v1 says" {
			t.Fatalf("got %q from the relay.v1 member", got)
		}
	}
	send(t, h1, websocket.TextMessage, []byte("to v1"))
	if f := next(t, rc); f.Kind != relayclient.KindMsg || string(f.Body) != "to v1" {
		t.Fatalf("relay.v1 member got %s %q", f.Kind, f.Body)
	}
}

// answer is an HTTP answer to a refused join: status, body, Retry-After.
type answer struct {
	status     int
	body       string
	retryAfter string
}

// h1Answer is what an HTTP/1.1 upgrade to path gets when it is refused.
func h1Answer(t *testing.T, s *server, path string, protocols ...string) answer {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: ioTimeout, Subprotocols: protocols}
	c, resp, err := d.Dial("ws://"+s.addr+path, nil)
	if err == nil {
		_ = c.Close()
		t.Fatalf("HTTP/1.1 upgrade to %s accepted", path)
	}
	if resp == nil {
		t.Fatalf("HTTP/1.1 upgrade to %s: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("Retry-After")}
}

// h2Answer is what an extended CONNECT to path gets when it is refused.
func h2Answer(t *testing.T, hc *h2client.Conn, path string, protocols ...string) answer {
	t.Helper()
	h := http.Header{"Sec-Websocket-Version": {"13"}}
	if len(protocols) > 0 {
		h.Set("Sec-Websocket-Protocol", strings.Join(protocols, ", "))
	}
	st, err := hc.Open(path, h)
	if err != nil {
		t.Fatal(err)
	}
	status, rh, body, err := st.Response(ioTimeout)
	if err != nil {
		t.Fatalf("h2 %s: %v", path, err)
	}
	if status == 200 {
		_ = st.Abort()
		t.Fatalf("extended CONNECT to %s accepted", path)
	}
	return answer{status, string(body), rh.Get("Retry-After")}
}

// TestH2RefusalsAsHTTP1 pins that a join refused over HTTP/2 gets the
// status, body and Retry-After the same join gets over HTTP/1.1: one
// admission check serves both.
func TestH2RefusalsAsHTTP1(t *testing.T) {
	s := startRelay(t, relay.Options{MaxMembers: 1})
	dial(t, s, "full", true)
	hc := dialH2(t, s)
	for _, tc := range []struct {
		name, path string
		protocols  []string
		status     int
	}{
		{"bad room", "/room/a%20b", nil, 400},
		{"empty room", "/room/", nil, 400},
		{"since without relay.v1", "/room/x?since=e.1", nil, 400},
		{"bad since", "/room/x?since=nope", []string{relayclient.Subprotocol}, 400},
		{"room full", "/room/full", nil, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := h1Answer(t, s, tc.path, tc.protocols...)
			if want.status != tc.status || (want.status == 503) != (want.retryAfter != "") {
				t.Fatalf("HTTP/1.1 answered %+v, want status %d, with Retry-After if 503", want, tc.status)
			}
			if got := h2Answer(t, hc, tc.path, tc.protocols...); got != want {
				t.Fatalf("HTTP/2 answered %+v, HTTP/1.1 %+v", got, want)
			}
		})
	}
	t.Run("other path", func(t *testing.T) {
		if got := h2Answer(t, hc, "/healthz"); got.status != 404 {
			t.Fatalf("extended CONNECT to /healthz answered %+v, want 404", got)
		}
	})
	t.Run("GET", func(t *testing.T) {
		st, err := hc.OpenRequest([]hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "relay"}, {Name: ":path", Value: "/healthz"},
		}, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if status, _, body, err := st.Response(ioTimeout); err != nil || status != 405 {
			t.Fatalf("GET over h2 answered %d %q (%v), want 405", status, body, err)
		}
	})
	t.Run("another protocol", func(t *testing.T) {
		st, err := hc.OpenRequest([]hpack.HeaderField{
			{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: "webtransport"}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "relay"}, {Name: ":path", Value: "/room/x"},
		}, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if status, _, body, err := st.Response(ioTimeout); err != nil || status != 501 {
			t.Fatalf("extended CONNECT for webtransport answered %d %q (%v), want 501", status, body, err)
		}
	})
	if n := s.Info().Connections; n != 1 {
		t.Fatalf("connections = %d, want the one member", n)
	}
}

// TestH2Drain pins the drain of members over HTTP/2: their connection gets
// GOAWAY(NO_ERROR) before any of them gets its 1001, a new connection's
// join is answered 503 with Retry-After, and the old connection closes
// once its streams have ended.
func TestH2Drain(t *testing.T) {
	// The clients answer the close but never end their streams: the
	// relay resets them WriteTimeout after its close, within the test's
	// wait for the connection to close.
	s := startRelay(t, relay.Options{DrainWindow: 100 * time.Millisecond, WriteTimeout: time.Second})
	hc := dialH2(t, s)
	a, _ := joinH2(t, hc, "d", true)
	b, _ := joinH2(t, hc, "d", true)
	h1, _ := dial(t, s, "d", true)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		done <- s.Drain(ctx)
	}()
	for i, c := range []*websocket.Conn{a, b} {
		code, text := closeCode(t, c)
		if code != websocket.CloseGoingAway || text != "going away" {
			t.Fatalf("h2 member %d closed with %d %q, want 1001", i, code, text)
		}
		// Frames of one connection arrive in order: the GOAWAY went first.
		if g := hc.GoAways(); len(g) == 0 || g[0].Code != http2.ErrCodeNo {
			t.Fatalf("GOAWAYs before the 1001: %+v", g)
		}
	}
	if code, _ := closeCode(t, h1); code != websocket.CloseGoingAway {
		t.Fatalf("HTTP/1.1 member closed with %d", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	select {
	case <-hc.Done():
	case <-time.After(ioTimeout):
		t.Fatal("the HTTP/2 connection stayed open after its streams ended")
	}
	hc2 := dialH2(t, s)
	if got := h2Answer(t, hc2, "/room/d"); got != (answer{503, "draining", "1"}) {
		t.Fatalf("join while draining answered %+v", got)
	}
	waitIdle(t, s)
}

// TestH2ResetFreesMember pins that a stream the client resets frees its
// member: the room empties and the relay's goroutines return to what they
// were.
func TestH2ResetFreesMember(t *testing.T) {
	s := startRelay(t, relay.Options{})
	hc := dialH2(t, s)
	keep, _ := joinH2(t, hc, "stay", true) // the connection stays busy
	base := runtime.NumGoroutine()
	var gone []*websocket.Conn
	for i := range 3 {
		c, _ := joinH2(t, hc, fmt.Sprintf("r%d", i), true)
		gone = append(gone, c)
	}
	waitFor(t, "4 members", func() bool { return s.Info().Connections == 4 })
	for _, c := range gone {
		if err := h2client.StreamOf(c).Abort(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the reset members to leave", func() bool {
		i := s.Info()
		return i.Connections == 1 && i.Rooms == 1
	})
	waitFor(t, fmt.Sprintf("goroutines back to %d", base), func() bool { return runtime.NumGoroutine() <= base })
	other, _ := joinH2(t, hc, "stay", true)
	send(t, keep, websocket.TextMessage, []byte("again"))
	if _, got := read(t, other); string(got) != "again" {
		t.Fatalf("got %q", got)
	}
	for _, c := range []*websocket.Conn{keep, other} {
		_ = h2client.StreamOf(c).Abort()
	}
	waitIdle(t, s)
}

// TestH2StreamLimit pins SETTINGS_MAX_CONCURRENT_STREAMS: a stream beyond
// it is refused with REFUSED_STREAM, and a place freed is taken again.
func TestH2StreamLimit(t *testing.T) {
	s := startRelay(t, relay.Options{H2MaxStreams: 2})
	hc := dialH2(t, s)
	if v := hc.Settings()[http2.SettingMaxConcurrentStreams]; v != 2 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d", v)
	}
	a, _ := joinH2(t, hc, "l", true)
	joinH2(t, hc, "l", true)
	st, err := hc.Open("/room/l", http.Header{"Sec-Websocket-Version": {"13"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.Response(ioTimeout); err == nil {
		t.Fatal("a third stream was answered")
	}
	if code, ok := st.Reset(); !ok || code != http2.ErrCodeRefusedStream {
		t.Fatalf("third stream reset %v %v, want REFUSED_STREAM", code, ok)
	}
	_ = h2client.StreamOf(a).Abort()
	waitFor(t, "a place", func() bool { return s.Info().Connections == 1 })
	joinH2(t, hc, "l", true)
}

// TestH2FrozenStream pins flow control as the backpressure: a member whose
// stream gives the relay no window (its client stopped reading) blocks
// only its own writer; the other member on the same connection gets every
// message, and the frozen one is closed by the relay's write timeout.
func TestH2FrozenStream(t *testing.T) {
	s := startRelay(t, relay.Options{WriteTimeout: 500 * time.Millisecond})
	hc := dialH2(t, s)
	frozen, _ := joinH2(t, hc, "f", true)
	reader, _ := joinH2(t, hc, "f", true)
	h1, _ := dial(t, s, "f", true)
	h2client.StreamOf(frozen).Freeze(true)
	msg := strings.Repeat("x", 8<<10)
	const n = 40 // 320 KiB: five times the frozen stream's window
	got := make(chan error, 1)
	go func() {
		for i := range n {
			_ = reader.SetReadDeadline(time.Now().Add(ioTimeout))
			_, b, err := reader.ReadMessage()
			if err != nil || string(b) != msg {
				got <- fmt.Errorf("message %d: %v (%d bytes)", i, err, len(b))
				return
			}
		}
		got <- nil
	}()
	for range n {
		send(t, h1, websocket.TextMessage, []byte(msg))
	}
	if err := <-got; err != nil {
		t.Fatalf("the reading member beside a frozen one: %v", err)
	}
	waitFor(t, "the frozen member to be closed", func() bool { return s.Info().Connections == 2 })
}

// TestH2NodeClient checks the relay against an HTTP/2 client we did not
// write (issue 21, item 6): Node.js's built-in http2 module opens two
// extended CONNECT streams on one session (testdata/h2ws.js), gets its
// hello frames, sends a masked text frame on one that the other and a
// member over HTTP/1.1 receive, and closes both with 1000.
func TestH2NodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not installed: .ci/run installs Debian's nodejs")
	}
	s := startRelay(t, relay.Options{})
	h1, _ := dial(t, s, "node", true)
	_, port, _ := net.SplitHostPort(s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*ioTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "testdata/h2ws.js", port, "node", "from node").CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got struct {
		Status  []int
		Hello   []string
		Clients []uint64
		Got     struct {
			Opcode int
			Text   string
		}
		Closes   []int
		Settings struct {
			EnableConnectProtocol bool
			MaxConcurrentStreams  int
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %s: %v", out, err)
	}
	t.Logf("node: %s", bytes.TrimSpace(out))
	switch {
	case fmt.Sprint(got.Status) != "[200 200]":
		t.Fatalf("statuses %v", got.Status)
	case fmt.Sprint(got.Hello) != "[hello hello node]" || got.Clients[0] == got.Clients[1]:
		t.Fatalf("hello frames %v %v", got.Hello, got.Clients)
	case got.Got.Opcode != 1 || got.Got.Text != "from node":
		t.Fatalf("the second stream got %+v", got.Got)
	case fmt.Sprint(got.Closes) != "[1000 1000]":
		t.Fatalf("close replies %v", got.Closes)
	case !got.Settings.EnableConnectProtocol || got.Settings.MaxConcurrentStreams != relay.DefaultH2MaxStreams:
		t.Fatalf("settings %+v", got.Settings)
	}
	if typ, b := read(t, h1); typ != websocket.TextMessage || string(b) != "from node" {
		t.Fatalf("the HTTP/1.1 member got %d %q", typ, b)
	}
	waitFor(t, "node's members to leave", func() bool { return s.Info().Connections == 1 })
}

// TestH2BusDown pins the bus-down path over HTTP/2: when Redis is lost, a
// member on a stream is closed with 1012 like one over HTTP/1.1, and a
// join over HTTP/2 gets the 503 "bus unavailable" with Retry-After that an
// HTTP/1.1 upgrade gets.
func TestH2BusDown(t *testing.T) {
	srv := redistest.Start(t)
	s := startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{ID: "r1"}))
	hc := dialH2(t, s)
	m, _ := joinH2(t, hc, "down", true)
	h1, _ := dial(t, s, "down", true)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*websocket.Conn{"h2": m, "h1": h1} {
		if code, text := closeCode(t, c); code != websocket.CloseServiceRestart || text != "bus unavailable" {
			t.Errorf("%s member closed with %d %q, want 1012", name, code, text)
		}
	}
	waitFor(t, "the relay to see the bus down", func() bool { return s.Info().BusDown })
	want := h1Answer(t, s, "/room/down")
	if want != (answer{503, "bus unavailable", "5"}) {
		t.Fatalf("HTTP/1.1 join with the bus down answered %+v", want)
	}
	if got := h2Answer(t, hc, "/room/down"); got != want {
		t.Fatalf("HTTP/2 join with the bus down answered %+v, HTTP/1.1 %+v", got, want)
	}
}
