package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// v1Dial joins room on s with relay.v1, resuming at since.
func v1Dial(t *testing.T, s *server, room string, since relayclient.Since) *relayclient.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	c, _, err := relayclient.Dial(ctx, &websocket.Dialer{HandshakeTimeout: ioTimeout}, "ws://"+s.addr+"/room/"+room, since)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func next(t *testing.T, c *relayclient.Conn) relayclient.Frame {
	t.Helper()
	_ = c.WS().SetReadDeadline(time.Now().Add(ioTimeout))
	f, err := c.Next()
	if err != nil {
		t.Fatalf("next frame: %v", err)
	}
	return f
}

// joinV1 reads the preamble up to LIVE and returns its frames (POS first).
func joinV1(t *testing.T, c *relayclient.Conn) []relayclient.Frame {
	t.Helper()
	var fs []relayclient.Frame
	for range 10_000 {
		f := next(t, c)
		f.Body = append([]byte(nil), f.Body...)
		fs = append(fs, f)
		if f.Kind == relayclient.KindLive {
			if fs[0].Kind != relayclient.KindPos {
				t.Fatalf("first frame %s, want POS", fs[0].Kind)
			}
			return fs
		}
	}
	t.Fatal("no LIVE")
	return nil
}

// kinds renders frames as "POS:3 MSG:4 LIVE:4" for comparisons.
func kinds(fs []relayclient.Frame) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", f.Kind, f.Offset)
	}
	return b.String()
}

func sendN(t *testing.T, c *websocket.Conn, prefix string, n int) {
	t.Helper()
	for i := range n {
		send(t, c, websocket.TextMessage, fmt.Appendf(nil, "%s%d", prefix, i))
	}
}

// TestResume: a relay.v1 client that leaves at offset 3 and comes back with
// since gets exactly offsets 4..9, then LIVE, then live messages, with no
// duplicate; the sender gets its ACKs in order.
func TestResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		buses func(*testing.T) (replica, replica)
	}{
		{"memory", memoryBuses},
		{"redis", redisBuses},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b1, b2 := tc.buses(t)
			r1 := startRelay(t, b1.options(relay.Options{ID: "r1"}))
			r2 := startRelay(t, b2.options(relay.Options{ID: "r2"}))
			sender := v1Dial(t, r1, "resume", relayclient.Since{})
			joinV1(t, sender)
			reader := v1Dial(t, r2, "resume", relayclient.Since{})
			pre := joinV1(t, reader)
			epoch := string(pre[0].Body)
			if kinds(pre) != "POS:0 LIVE:0" {
				t.Fatalf("preamble %s", kinds(pre))
			}
			sendN(t, sender.WS(), "m", 3)
			for i := range 3 {
				if f := next(t, sender); f.Kind != relayclient.KindAck || f.Offset != uint64(i+1) {
					t.Fatalf("sender frame %d: %s:%d, want ACK:%d", i, f.Kind, f.Offset, i+1)
				}
				if f := next(t, reader); f.Kind != relayclient.KindMsg || f.Offset != uint64(i+1) || string(f.Body) != fmt.Sprint("m", i) {
					t.Fatalf("reader frame %d: %s:%d %q", i, f.Kind, f.Offset, f.Body)
				}
			}
			at := reader.Position()
			if at != (relayclient.Since{Epoch: epoch, Offset: 3}) {
				t.Fatalf("position %+v", at)
			}
			_ = reader.Close()
			waitFor(t, "reader to leave", func() bool { return r2.Info().Connections == 0 })

			sendN(t, sender.WS(), "n", 6)
			for i := range 6 {
				if f := next(t, sender); f.Kind != relayclient.KindAck || f.Offset != uint64(4+i) {
					t.Fatalf("ack %s:%d", f.Kind, f.Offset)
				}
			}
			back := v1Dial(t, r2, "resume", at)
			pre = joinV1(t, back)
			if got := kinds(pre); got != "POS:9 MSG:4 MSG:5 MSG:6 MSG:7 MSG:8 MSG:9 LIVE:9" {
				t.Fatalf("resume preamble %s", got)
			}
			if string(pre[1].Body) != "n0" || pre[1].Type != relayclient.TypeText {
				t.Fatalf("first replayed %q type %d", pre[1].Body, pre[1].Type)
			}
			send(t, sender.WS(), websocket.BinaryMessage, []byte("live"))
			if f := next(t, back); f.Kind != relayclient.KindMsg || f.Offset != 10 || string(f.Body) != "live" || f.Type != relayclient.TypeBinary {
				t.Fatalf("live frame %s:%d %q", f.Kind, f.Offset, f.Body)
			}

			// Resuming at the head replays nothing.
			head := v1Dial(t, r1, "resume", back.Position())
			if got := kinds(joinV1(t, head)); got != "POS:10 LIVE:10" {
				t.Fatalf("resume at head: %s", got)
			}
		})
	}
}

// TestResync: since of a lost room (keys deleted) or of trimmed history
// gets RESYNC and the retained history.
func TestResync(t *testing.T) {
	srv := redistest.Start(t)
	rep := redisReplica(t, srv.URL(), roomlog.RedisOptions{History: 10})
	s := startRelay(t, rep.options(relay.Options{}))
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()

	a := v1Dial(t, s, "lost", relayclient.Since{})
	joinV1(t, a)
	sendN(t, a.WS(), "x", 2)
	next(t, a)
	next(t, a)
	old := relayclient.Since{Epoch: a.Position().Epoch, Offset: 2}
	_ = a.Close()
	waitIdle(t, s)
	if err := admin.Del(ctx, "wsgate:{lost}:meta", "wsgate:{lost}:log").Err(); err != nil {
		t.Fatal(err)
	}
	b := v1Dial(t, s, "lost", old)
	pre := joinV1(t, b)
	if got := kinds(pre); got != "POS:0 RESYNC:0 LIVE:0" {
		t.Fatalf("after loss: %s", got)
	}
	if string(pre[1].Body) == old.Epoch || string(pre[1].Body) != string(pre[0].Body) {
		t.Fatalf("RESYNC epoch %q, old %q", pre[1].Body, old.Epoch)
	}

	// Trimmed: 300 messages over a history of 10; since=1 is long gone.
	sendN(t, b.WS(), "t", 300)
	for range 300 {
		next(t, b)
	}
	c := v1Dial(t, s, "lost", relayclient.Since{Epoch: b.Position().Epoch, Offset: 1})
	pre = joinV1(t, c)
	if pre[1].Kind != relayclient.KindResync || pre[2].Kind != relayclient.KindMsg || pre[2].Offset <= 2 {
		t.Fatalf("after trim: %s", kinds(pre[:3]))
	}
	last := pre[len(pre)-2]
	if last.Offset != 300 || pre[len(pre)-1].Offset != 300 || len(pre)-3 < 10 {
		t.Fatalf("after trim: %d replayed up to %d", len(pre)-3, last.Offset)
	}
	if c.Position().Offset != 300 {
		t.Fatalf("position %+v", c.Position())
	}
}

// TestEpochChangeLive: a live relay.v1 member of a room Redis loses is told
// with RESYNC, then follows the new epoch.
func TestEpochChangeLive(t *testing.T) {
	srv := redistest.Start(t)
	s := startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{}))
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	watcher := v1Dial(t, s, "flip", relayclient.Since{})
	joinV1(t, watcher)
	writer := v1Dial(t, s, "flip", relayclient.Since{})
	joinV1(t, writer)
	sendN(t, writer.WS(), "a", 2)
	next(t, watcher)
	next(t, watcher)
	old := watcher.Position().Epoch
	if err := admin.Del(context.Background(), "wsgate:{flip}:meta", "wsgate:{flip}:log").Err(); err != nil {
		t.Fatal(err)
	}
	send(t, writer.WS(), websocket.TextMessage, []byte("new"))
	var fs []relayclient.Frame
	for len(fs) == 0 || fs[len(fs)-1].Kind != relayclient.KindLive {
		fs = append(fs, next(t, watcher))
	}
	if got := kinds(fs); got != "RESYNC:0 MSG:1 LIVE:1" {
		t.Fatalf("after the epoch change: %s", got)
	}
	if p := watcher.Position(); p.Epoch == old || p.Offset != 1 {
		t.Fatalf("position %+v", p)
	}
}

func TestBadSince(t *testing.T) {
	s := startRelay(t, relay.Options{})
	for _, tc := range []struct {
		name  string
		query string
		v1    bool
	}{
		{"empty", "since=", true},
		{"empty epoch", "since=.5", true},
		{"bad chars", "since=ab-c.5", true},
		{"negative", "since=abc.-1", true},
		{"overflow", "since=abc.18446744073709551616", true},
		{"missing dot", "since=abc5", true},
		{"epoch too long", "since=" + strings.Repeat("e", 65) + ".1", true},
		{"without relay.v1", "since=abc.5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.v1 {
				h.Set("Sec-WebSocket-Protocol", "chat, relay.v1")
			}
			d := websocket.Dialer{HandshakeTimeout: ioTimeout}
			c, resp, err := d.Dial("ws://"+s.addr+"/room/r?"+tc.query, h)
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

// TestPlainHistoryNoEcho: a plain member joining late gets the history as
// plain frames; nobody ever gets its own message back.
func TestPlainHistoryNoEcho(t *testing.T) {
	s := startRelay(t, relay.Options{})
	a, _ := dial(t, s, "hist", true)
	send(t, a, websocket.TextMessage, []byte("h1"))
	send(t, a, websocket.BinaryMessage, []byte("h2"))
	waitFor(t, "two commits", func() bool { // observable through a relay.v1 join
		return strings.HasPrefix(kinds(joinV1(t, v1Dial(t, s, "hist", relayclient.Since{}))), "POS:2")
	})
	b, _ := dial(t, s, "hist", true)
	if typ, p := read(t, b); typ != websocket.TextMessage || string(p) != "h1" {
		t.Fatalf("history 1: %d %q", typ, p)
	}
	if typ, p := read(t, b); typ != websocket.BinaryMessage || string(p) != "h2" {
		t.Fatalf("history 2: %d %q", typ, p)
	}
	send(t, b, websocket.TextMessage, []byte("from-b"))
	if _, p := read(t, a); string(p) != "from-b" {
		t.Fatalf("a got %q, want from-b (never its own)", p)
	}
	send(t, a, websocket.TextMessage, []byte("end"))
	if _, p := read(t, b); string(p) != "end" {
		t.Fatalf("b got %q, want end (never its own)", p)
	}
}

// redisPair starts a Redis server, two relays r1 and r2 on it, and an
// admin client of it.
func redisPair(t *testing.T) (r1, r2 *server, admin *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	// The tests on the pair send hundreds of messages as fast as they can
	// while subscriptions are cut; under -race on a busy machine a member's
	// queue can pass the default 256 and end it with 1013, which is the
	// slow-consumer test's subject (TestSlowConsumer), not theirs.
	const queue = 4 * relay.DefaultSendQueue
	r1 = startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{ID: "r1", SendQueue: queue}))
	r2 = startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{ID: "r2", SendQueue: queue}))
	admin = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	return r1, r2, admin
}

// TestPubSubInterrupted: a replica whose Redis subscription is killed
// repairs the gap from the Stream, so its relay.v1 member sees every offset
// exactly once, in order.
func TestPubSubInterrupted(t *testing.T) {
	r1, r2, admin := redisPair(t)
	writer := v1Dial(t, r1, "cut", relayclient.Since{})
	joinV1(t, writer)
	reader := v1Dial(t, r2, "cut", relayclient.Since{})
	joinV1(t, reader)

	const n = 400
	var wg sync.WaitGroup
	wg.Go(func() { // the writer's ACKs, in order
		for want := uint64(1); want <= n; want++ {
			_ = writer.WS().SetReadDeadline(time.Now().Add(ioTimeout))
			f, err := writer.Next()
			if err != nil || f.Kind != relayclient.KindAck || f.Offset != want {
				t.Errorf("writer got %s:%d %v, want ACK:%d", f.Kind, f.Offset, err, want)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range n {
			if err := writer.Send(relayclient.TypeText, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			if i%100 == 50 {
				if err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
					t.Errorf("CLIENT KILL: %v", err)
				}
			}
		}
	})
	for want := uint64(1); want <= n; want++ {
		f := next(t, reader) // Next fails on a duplicate or reordering
		if f.Kind != relayclient.KindMsg || f.Offset != want || string(f.Body) != fmt.Sprint(want-1) {
			t.Fatalf("got %s:%d %q, want MSG:%d", f.Kind, f.Offset, f.Body, want)
		}
	}
	wg.Wait()
	waitFor(t, "resubscribes and repairs counted", func() bool {
		i := r2.Info()
		return i.Resubscribes > 0 && i.Repairs > 0
	})
}

func TestMaxMembers(t *testing.T) {
	s := startRelay(t, relay.Options{MaxMembers: 2})
	dial(t, s, "small", true)
	dial(t, s, "small", true)
	d := websocket.Dialer{HandshakeTimeout: ioTimeout}
	if c, resp, err := d.Dial("ws://"+s.addr+"/room/small", nil); err == nil {
		_ = c.Close()
		t.Fatal("third member accepted")
	} else if resp == nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		// Retry-After was set before ctx.Error, which reset it: the 503
		// went without it.
		t.Fatalf("third member: %v %v, want 503 with Retry-After 1", err, resp)
	}
	dial(t, s, "other", true) // other rooms are not affected
}

func TestHealthAgent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weight int
		want   string
	}{
		{"no weight", 0, "up, load=1"},
		{"weight", 7, "up, load=1, weight=7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRelay(t, relay.Options{Weight: tc.weight, WriteTimeout: time.Second})
			c, _ := dial(t, s, "h", true)
			check := func(status int, body, agent string) {
				t.Helper()
				cl := http.Client{Timeout: ioTimeout}
				resp, err := cl.Get("http://" + s.addr + "/healthz")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != status || resp.Header.Get(relay.AgentHeader) != agent {
					t.Fatalf("healthz = %d %q, want %d %q", resp.StatusCode, resp.Header.Get(relay.AgentHeader), status, agent)
				}
			}
			check(200, "ok", tc.want)
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				done <- s.Drain(ctx) // the client never answers: cut at the deadline
			}()
			<-done
			_ = c.Close()
			waitIdle(t, s)
			check(503, "draining", "drain, load=0")
		})
	}
}
