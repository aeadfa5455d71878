package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/bus"
)

// counter is a Bus endpoint that can say how many subscriptions it holds.
type counter interface {
	bus.Bus
	Subscriptions() int
}

// pair returns two endpoints of one bus, as two replicas would see it, and a
// function that reports how many channels the server side still holds.
type pairFunc func(t *testing.T) (a, b counter, serverSubs func() int)

func memoryPair(t *testing.T) (counter, counter, func() int) {
	m := bus.NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	return m.Endpoint(), m.Endpoint(), m.Subscriptions
}

func redisPair(t *testing.T) (counter, counter, func() int) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func() *bus.Redis {
		r, err := bus.NewRedis(ctx, bus.RedisOptions{URL: srv.URL(), Logger: testproc.Logger(t)})
		if err != nil {
			t.Fatalf("NewRedis: %v", err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	channels := func() int {
		cs, err := admin.PubSubChannels(context.Background(), "*").Result()
		if err != nil {
			t.Errorf("PUBSUB CHANNELS: %v", err)
		}
		return len(cs)
	}
	return open(), open(), channels
}

type got struct {
	mu   sync.Mutex
	msgs []string
	ch   chan struct{}
}

func newGot() *got { return &got{ch: make(chan struct{}, 1024)} }

func (g *got) handler(tag string) bus.Handler {
	return func(room string, msg []byte) {
		g.mu.Lock()
		g.msgs = append(g.msgs, fmt.Sprintf("%s:%s:%s", tag, room, msg))
		g.mu.Unlock()
		g.ch <- struct{}{}
	}
}

func (g *got) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-g.ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %d messages, have %v", n, g.snapshot())
		}
	}
	return g.snapshot()
}

func (g *got) snapshot() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.msgs...)
}

func TestBus(t *testing.T) {
	for _, tc := range []struct {
		name string
		pair pairFunc
	}{
		{"memory", memoryPair},
		{"redis", redisPair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, serverSubs := tc.pair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			g := newGot()
			sa, err := a.Subscribe(ctx, "r1", g.handler("a"))
			if err != nil {
				t.Fatalf("subscribe a: %v", err)
			}
			sb, err := b.Subscribe(ctx, "r1", g.handler("b"))
			if err != nil {
				t.Fatalf("subscribe b: %v", err)
			}
			so, err := b.Subscribe(ctx, "other", g.handler("o"))
			if err != nil {
				t.Fatalf("subscribe other: %v", err)
			}
			if n := a.Subscriptions() + b.Subscriptions(); n != 3 {
				t.Fatalf("subscriptions = %d, want 3", n)
			}
			if err := a.Publish(ctx, "r1", []byte("hi")); err != nil {
				t.Fatalf("publish: %v", err)
			}
			msgs := g.wait(t, 2)
			want := map[string]bool{"a:r1:hi": true, "b:r1:hi": true}
			for _, m := range msgs {
				if !want[m] {
					t.Errorf("unexpected delivery %q", m)
				}
				delete(want, m)
			}
			// A marker on the other room proves r1 got nothing more meanwhile.
			if err := b.Publish(ctx, "other", []byte("end")); err != nil {
				t.Fatalf("publish other: %v", err)
			}
			msgs = g.wait(t, 1)
			if len(msgs) != 3 || msgs[2] != "o:other:end" {
				t.Fatalf("deliveries = %v", msgs)
			}
			for _, s := range []bus.Subscription{sa, sb, so, sa} {
				if err := s.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
			}
			if n := a.Subscriptions() + b.Subscriptions(); n != 0 {
				t.Fatalf("subscriptions after close = %d, want 0", n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for serverSubs() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("server still holds %d subscriptions", serverSubs())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestRedisResubscribeSameRoom(t *testing.T) {
	// Closing the last subscription of a room and taking a new one right away
	// must leave the channel subscribed: UNSUBSCRIBE and SUBSCRIBE are sent in
	// the order the calls were made.
	a, b, _ := redisPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := newGot()
	for i := range 20 {
		s, err := a.Subscribe(ctx, "flip", g.handler("a"))
		if err != nil {
			t.Fatalf("subscribe %d: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	if _, err := a.Subscribe(ctx, "flip", g.handler("a")); err != nil {
		t.Fatalf("final subscribe: %v", err)
	}
	if err := b.Publish(ctx, "flip", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if msgs := g.wait(t, 1); msgs[0] != "a:flip:x" {
		t.Fatalf("got %v", msgs)
	}
}

func TestClosedBus(t *testing.T) {
	for _, tc := range []struct {
		name string
		pair pairFunc
	}{
		{"memory", memoryPair},
		{"redis", redisPair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, _ := tc.pair(t)
			switch x := a.(type) {
			case *bus.Redis:
				_ = x.Close()
			case *bus.MemoryEndpoint:
				// Closing the Memory bus closes its endpoints.
				m := bus.NewMemory()
				a = m.Endpoint()
				_ = m.Close()
			}
			ctx := context.Background()
			if err := a.Publish(ctx, "r", nil); !errors.Is(err, bus.ErrClosed) {
				t.Errorf("publish after close: %v, want ErrClosed", err)
			}
			if _, err := a.Subscribe(ctx, "r", func(string, []byte) {}); !errors.Is(err, bus.ErrClosed) {
				t.Errorf("subscribe after close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestNewRedisBadURL(t *testing.T) {
	redistest.QuietClients(t) // the refused dial is go-redis's to log
	for _, url := range []string{"", "http://x", "redis://127.0.0.1:1/0"} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if r, err := bus.NewRedis(ctx, bus.RedisOptions{URL: url, Logger: testproc.Logger(t)}); err == nil {
				_ = r.Close()
				t.Fatalf("NewRedis(%q) succeeded", url)
			}
		})
	}
}

// subscribed opens a Redis bus with opts, subscribed to channel, and
// returns it with the channel its handler sends each message to; the bus
// is closed when the test ends.
func subscribed(ctx context.Context, t *testing.T, opts bus.RedisOptions, channel string) (*bus.Redis, chan []byte) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testproc.Logger(t)
	}
	r, err := bus.NewRedis(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	events := make(chan []byte, 16)
	if _, err := r.Subscribe(ctx, channel, func(_ string, msg []byte) { events <- msg }); err != nil {
		t.Fatal(err)
	}
	return r, events
}

// TestRedisResubscribeGap: after Redis kills the subscriber connection,
// the bus re-subscribes, counts it, and hands the handler a nil message,
// and messages flow again.
func TestRedisResubscribeGap(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, events := subscribed(ctx, t, bus.RedisOptions{URL: srv.URL()}, "g")
	if err := r.Publish(ctx, "g", nil); err != nil {
		t.Fatal(err)
	}
	if m := <-events; m == nil || len(m) != 0 {
		t.Fatalf("empty message arrived as %v (nil is the gap marker)", m)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-events:
		if m != nil {
			t.Fatalf("got %q, want the nil gap marker", m)
		}
	case <-ctx.Done():
		t.Fatal("no gap marker after the subscriber connection was killed")
	}
	if n := r.Resubscribes(); n != 1 {
		t.Fatalf("resubscribes = %d", n)
	}
	if up, _ := r.State(); !up {
		t.Fatal("bus down after losing one connection to a Redis that answers")
	}
	if err := r.Publish(ctx, "g", []byte("again")); err != nil {
		t.Fatal(err)
	}
	if m := <-events; string(m) != "again" {
		t.Fatalf("after resubscribe got %q", m)
	}
}

// TestRedisState: the bus says it is down soon after redis-server dies
// (killed, its port refusing), and up again once a server answers on the
// same address, with its subscriptions taken again (so the relay above it
// can close its clients with a close frame, then take joins again).
func TestRedisState(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, events := subscribed(ctx, t, bus.RedisOptions{URL: srv.URL()}, "s")
	up, changed := r.State()
	if !up {
		t.Fatal("new bus is down")
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("state did not change after redis-server was killed")
	}
	up, changed = r.State()
	if up {
		t.Fatal("bus up with redis-server dead")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("state did not change after redis-server came back")
	}
	if up, _ := r.State(); !up {
		t.Fatal("bus down with redis-server back")
	}
	select {
	case m := <-events:
		if m != nil {
			t.Fatalf("got %q, want the gap marker of the re-subscription", m)
		}
	case <-ctx.Done():
		t.Fatal("channel not re-subscribed")
	}
	if err := r.Publish(ctx, "s", []byte("back")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-events:
		if string(m) != "back" {
			t.Fatalf("got %q, want back", m)
		}
	case <-ctx.Done():
		t.Fatal("no message after redis-server came back")
	}
}

// TestRedisStateFrozen: a server that stops answering without closing its
// connections (here frozen with SIGSTOP; a partition or a frozen host looks
// the same) makes the bus down within about two ping intervals and the
// probe's timeout. The subscriber connection used to be pinged and never
// checked for the answer, so it waited for TCP to give up, for minutes.
func TestRedisStateFrozen(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, events := subscribed(ctx, t, bus.RedisOptions{URL: srv.URL(), PingInterval: 100 * time.Millisecond}, "f")
	_, changed := r.State()
	if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(srv.Pid(), syscall.SIGCONT)
		}
	}
	defer thaw()
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("bus still up with redis-server frozen")
	}
	up, changed := r.State()
	if up {
		t.Fatal("bus up with redis-server frozen")
	}
	thaw()
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("bus still down with redis-server thawed")
	}
	if up, _ := r.State(); !up {
		t.Fatal("bus down with redis-server thawed")
	}
	if err := r.Publish(ctx, "f", []byte("thawed")); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-events:
			if m == nil {
				continue // a gap marker, if go-redis replaced the connection
			}
			if string(m) != "thawed" {
				t.Fatalf("got %q, want thawed", m)
			}
			return
		case <-ctx.Done():
			t.Fatal("no message after redis-server thawed")
		}
	}
}

// TestRedisStateBackSoon: after a long outage the bus is up again soon
// after Redis answers, not after a retry backoff grown to seconds (issue 19
// item 4). The subscriber's backoff used to double up to 2 s, so a relay
// whose bus had failed a few times stayed down (refusing joins) for up to
// 2 s after a Sentinel failover had made Redis reachable, while the other
// relay took writes again: a relay.v1 reader that came back that much
// later than the writer found its position trimmed from the room's
// history and got RESYNC instead of acknowledged writes. Redis comes back
// just after a failure was counted, when the loop starts its longest
// wait. The test asserts the bus comes back and logs how long it took;
// the wait's bound is TestBackoffWithinDownPoll's, which needs no clock.
func TestRedisStateBackSoon(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _ := subscribed(ctx, t, bus.RedisOptions{URL: srv.URL()}, "b")
	_, changed := r.State()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("state did not change after redis-server was killed")
	}
	up, changed := r.State()
	if up {
		t.Fatal("bus up with redis-server dead")
	}
	// Eight failures: the old backoff (50 ms doubling) had reached 2 s.
	// Then wait for one more, so the loop has just begun a wait.
	for r.Errors() < 8 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	n := r.Errors()
	for r.Errors() == n && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatalf("only %d receive failures counted with redis-server dead", r.Errors())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("state did not change after redis-server came back")
	}
	if up, _ := r.State(); !up {
		t.Fatal("bus down with redis-server back")
	}
	// The bound is TestBackoffWithinDownPoll's; a wall-clock one here
	// would fail on a loaded machine. The time is logged for a reader.
	t.Logf("bus up %v after redis-server answered again (after %d receive failures)", time.Since(back).Round(time.Millisecond), n+1)
}
