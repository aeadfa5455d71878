package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// busCounter is a bus that can tell how many subscriptions it holds.
type busCounter interface {
	bus.Bus
	Subscriptions() int
}

// replica is what one relay replica is given: its bus and its room log.
type replica struct {
	bus busCounter
	log relay.Log
}

func (r replica) options(o relay.Options) relay.Options {
	o.Bus, o.Log = r.bus, r.log
	return o
}

func memoryBuses(t *testing.T) (replica, replica) {
	m := bus.NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	return replica{bus: m.Endpoint()}, replica{bus: m.Endpoint()}
}

// memoryEndpoint returns an endpoint of a private in-process bus.
func memoryEndpoint(t *testing.T) *bus.MemoryEndpoint {
	m := bus.NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	return m.Endpoint()
}

func redisBuses(t *testing.T) (replica, replica) {
	srv := redistest.Start(t)
	return redisReplica(t, srv.URL(), roomlog.RedisOptions{}), redisReplica(t, srv.URL(), roomlog.RedisOptions{})
}

// redisReplica connects a bus and a room log to the Redis at url.
func redisReplica(t *testing.T, url string, lo roomlog.RedisOptions) replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	b, err := bus.NewRedis(ctx, bus.RedisOptions{URL: url, Logger: testproc.Logger(t)})
	if err != nil {
		t.Fatalf("NewRedis bus: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	lo.URL = url
	l, err := roomlog.NewRedis(ctx, lo)
	if err != nil {
		t.Fatalf("NewRedis log: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return replica{bus: b, log: l}
}

func TestFanout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		buses       func(*testing.T) (replica, replica)
		sameReplica bool
	}{
		{"memory/two-replicas", memoryBuses, false},
		{"memory/one-replica", memoryBuses, true},
		{"redis/two-replicas", redisBuses, false},
		{"redis/one-replica", redisBuses, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b1, b2 := tc.buses(t)
			r1 := startRelay(t, b1.options(relay.Options{ID: "r1"}))
			r2 := startRelay(t, b2.options(relay.Options{ID: "r2"}))
			other := r2
			if tc.sameReplica {
				other = r1
			}
			a, _ := dial(t, r1, "room-1", true)
			b, _ := dial(t, other, "room-1", true)
			c, _ := dial(t, other, "room-1", true)
			d, _ := dial(t, r1, "other", true)
			e, _ := dial(t, r2, "other", true)

			send(t, a, websocket.TextMessage, []byte("t1"))
			send(t, a, websocket.BinaryMessage, []byte{0, 1, 2})
			send(t, b, websocket.TextMessage, []byte("from-b"))

			expect := func(name string, c *websocket.Conn, want ...string) {
				t.Helper()
				got := map[string]int{}
				for range want {
					typ, p := read(t, c)
					got[msg(typ, string(p))]++
				}
				for _, w := range want {
					if got[w] == 0 {
						t.Errorf("%s: missing %q, got %v", name, w, got)
					}
					got[w]--
				}
			}
			expect("b", b, msg(1, "t1"), msg(2, "\x00\x01\x02"))
			expect("c", c, msg(1, "t1"), msg(2, "\x00\x01\x02"), msg(1, "from-b"))
			expect("a", a, msg(1, "from-b"))

			// Markers: whatever arrives before them would be a duplicate, an
			// echo or a leak from another room.
			send(t, a, websocket.TextMessage, []byte("end-a"))
			send(t, b, websocket.TextMessage, []byte("end-b"))
			send(t, d, websocket.TextMessage, []byte("end-d"))
			send(t, e, websocket.TextMessage, []byte("end-e"))
			expect("a end", a, msg(1, "end-b"))
			expect("b end", b, msg(1, "end-a"))
			expect("c end", c, msg(1, "end-a"), msg(1, "end-b"))
			expect("d end", d, msg(1, "end-e"))
			expect("e end", e, msg(1, "end-d"))

			for _, x := range []*websocket.Conn{a, b, c, d, e} {
				_ = x.Close()
			}
			waitIdle(t, r1)
			waitIdle(t, r2)
			waitFor(t, "bus subscriptions to return to 0", func() bool {
				return b1.bus.Subscriptions()+b2.bus.Subscriptions() == 0
			})
		})
	}
}

func TestHello(t *testing.T) {
	s := startRelay(t, relay.Options{ID: "replica-x"})
	y, h := dial(t, s, "lobby", true)
	var got map[string]any
	if err := json.Unmarshal(h, &got); err != nil {
		t.Fatalf("hello %q: %v", h, err)
	}
	if got["type"] != "hello" || got["replica"] != "replica-x" || got["room"] != "lobby" || got["client"] == nil {
		t.Fatalf("hello = %s", h)
	}

	// Without ?hello=1 the first frame is a peer's message.
	x, _ := dial(t, s, "lobby", false)
	waitFor(t, "two connections", func() bool { return s.Info().Connections == 2 })
	send(t, y, websocket.BinaryMessage, []byte("first"))
	if typ, p := read(t, x); typ != websocket.BinaryMessage || string(p) != "first" {
		t.Fatalf("first frame without hello = %d %q", typ, p)
	}
}

func TestSlowConsumer(t *testing.T) {
	s := startRelay(t, relay.Options{SendQueue: 4, WriteTimeout: 5 * time.Second})
	slow, _ := dial(t, s, "flood", true)
	fast, _ := dial(t, s, "flood", true)
	payload := bytes.Repeat([]byte("x"), 64<<10)
	// Flood until the relay gives up on the reader that never reads: the
	// socket buffers fill, then its 4-message queue.
	for i := 0; s.Info().SlowClosed == 0; i++ {
		if i == 100_000 {
			t.Fatal("no slow-consumer close after 100000 messages")
		}
		send(t, fast, websocket.BinaryMessage, payload)
	}
	if code, text := closeCode(t, slow); code != websocket.CloseTryAgainLater || text != "slow consumer" {
		t.Fatalf("slow client closed with %d %q, want 1013 \"slow consumer\"", code, text)
	}
	if n := s.Info().SlowClosed; n != 1 {
		t.Fatalf("slow_closed = %d, want 1", n)
	}
	_ = fast.Close()
	waitIdle(t, s)
}

func TestOversizeMessage(t *testing.T) {
	s := startRelay(t, relay.Options{MaxMessage: 1024})
	big, _ := dial(t, s, "r", true)
	peer, _ := dial(t, s, "r", true)
	send(t, big, websocket.TextMessage, bytes.Repeat([]byte("a"), 1024)) // at the limit: relayed
	if _, p := read(t, peer); len(p) != 1024 {
		t.Fatalf("peer got %d bytes", len(p))
	}
	send(t, big, websocket.BinaryMessage, make([]byte, 1025))
	if code, _ := closeCode(t, big); code != websocket.CloseMessageTooBig {
		t.Fatalf("oversize sender closed with %d, want 1009", code)
	}
	waitFor(t, "one connection", func() bool { return s.Info().Connections == 1 })
	// The limit is on the message, not the frame: two fragments of 600
	// bytes, each under it, make one message over it.
	frag, _ := dial(t, s, "r", true)
	rawFrame(t, frag, false, wsframe.OpBinary, make([]byte, 600))
	rawFrame(t, frag, true, wsframe.OpContinuation, make([]byte, 600))
	if code, _ := closeCode(t, frag); code != websocket.CloseMessageTooBig {
		t.Fatalf("sender of an oversize message in fragments closed with %d, want 1009", code)
	}
	waitFor(t, "one connection", func() bool { return s.Info().Connections == 1 })
	_ = peer.Close()
	waitIdle(t, s)
}

func TestHTTP(t *testing.T) {
	s := startRelay(t, relay.Options{ID: "h1"})
	for _, tc := range []struct {
		path   string
		status int
		body   string // prefix
	}{
		{"/healthz", 200, "ok"},
		{"/info", 200, `{"replica":"h1","connections":0,"rooms":0,"subscriptions":0,"slow_closed":0,"bus_errors":0,"repairs":0,"rewinds":0,"resubscribes":0,"log_errors":0,"invalid_text":0,"bus_down":false}`},
		{"/", 200, "<!doctype html>"},
		{"/nope", 404, ""},
		{"/room/", 400, ""},
		{"/room/a%20b", 400, ""},
		{"/room/a/b", 400, ""},
		{"/room/%C3%A9", 400, ""},
		{"/room/" + strings.Repeat("r", relay.MaxRoomLen+1), 400, ""},
		{"/room/" + strings.Repeat("r", relay.MaxRoomLen), 400, ""}, // valid id, but not an upgrade
	} {
		t.Run(tc.path[:min(len(tc.path), 20)], func(t *testing.T) {
			status, body := httpGet(t, s, tc.path)
			if status != tc.status || !strings.HasPrefix(body, tc.body) {
				t.Fatalf("GET %s = %d %q, want %d %q", tc.path, status, body, tc.status, tc.body)
			}
		})
	}
}

func TestBadRoomRefusesUpgrade(t *testing.T) {
	s := startRelay(t, relay.Options{})
	for _, room := range []string{"", "a%20b", "a/b", "%C3%A9", strings.Repeat("r", relay.MaxRoomLen+1)} {
		t.Run(room[:min(len(room), 10)], func(t *testing.T) {
			d := websocket.Dialer{HandshakeTimeout: ioTimeout}
			c, resp, err := d.Dial("ws://"+s.addr+"/room/"+room, nil)
			if err == nil {
				_ = c.Close()
				t.Fatal("upgrade accepted")
			}
			if resp == nil || resp.StatusCode != 400 {
				t.Fatalf("dial: %v, response %v", err, resp)
			}
		})
	}
	if n := s.Info().Connections; n != 0 {
		t.Fatalf("connections = %d", n)
	}
}

func TestDrain(t *testing.T) {
	s := startRelay(t, relay.Options{DrainWindow: 200 * time.Millisecond})
	var conns []*websocket.Conn
	for i := range 6 {
		c, _ := dial(t, s, []string{"a", "b"}[i%2], true)
		conns = append(conns, c)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		done <- s.Drain(ctx)
	}()
	for i, c := range conns {
		if code, text := closeCode(t, c); code != websocket.CloseGoingAway || text != "going away" {
			t.Fatalf("client %d closed with %d %q, want 1001", i, code, text)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if status, body := httpGet(t, s, "/healthz"); status != 503 || body != "draining" {
		t.Fatalf("healthz while draining = %d %q", status, body)
	}
	d := websocket.Dialer{HandshakeTimeout: ioTimeout}
	if c, resp, err := d.Dial("ws://"+s.addr+"/room/a", nil); err == nil {
		_ = c.Close()
		t.Fatal("upgrade accepted while draining")
	} else if resp == nil || resp.StatusCode != 503 {
		t.Fatalf("dial while draining: %v %v", err, resp)
	}
	waitIdle(t, s)
}

func TestDrainDeadlineCutsStragglers(t *testing.T) {
	s := startRelay(t, relay.Options{DrainWindow: time.Millisecond, WriteTimeout: time.Minute})
	// A client that never reads never answers the close handshake.
	dial(t, s, "a", true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Drain(ctx); err == nil {
		t.Fatal("Drain returned nil with a client that never answers")
	}
	waitIdle(t, s)
}

func TestDrainEmpty(t *testing.T) {
	s := startRelay(t, relay.Options{})
	if err := s.Drain(context.Background()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if status, _ := httpGet(t, s, "/healthz"); status != 503 {
		t.Fatalf("healthz = %d", status)
	}
}

// TestRoomChurn pins the leak the design warns of: members keyed by
// something other than a stable id leave rooms behind. Many clients join
// and leave rooms concurrently; everything must return to zero.
func TestRoomChurn(t *testing.T) {
	b1, b2 := memoryBuses(t)
	r1 := startRelay(t, b1.options(relay.Options{ID: "r1"}))
	r2 := startRelay(t, b2.options(relay.Options{ID: "r2"}))
	errs := make(chan error, 40)
	for i := range 40 {
		go func() {
			s := []*server{r1, r2}[i%2]
			d := websocket.Dialer{HandshakeTimeout: ioTimeout}
			for j := range 5 {
				c, _, err := d.Dial("ws://"+s.addr+"/room/churn-"+string(rune('a'+(i+j)%3))+"?hello=1", nil)
				if err != nil {
					errs <- err
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(ioTimeout))
				_, _, err = c.ReadMessage()
				_ = c.WriteMessage(websocket.TextMessage, []byte("hi"))
				_ = c.Close()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Fatalf("client: %v", err)
		}
	}
	waitIdle(t, r1)
	waitIdle(t, r2)
	waitFor(t, "bus subscriptions to return to 0", func() bool {
		return b1.bus.Subscriptions()+b2.bus.Subscriptions() == 0
	})
}
