package roomlog_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

const ioTimeout = 10 * time.Second

// log is what both implementations offer.
type log interface {
	Append(ctx context.Context, room string, data []byte) (roomlog.Position, error)
	Position(ctx context.Context, room string) (roomlog.Position, error)
	Range(ctx context.Context, room string, after uint64) (roomlog.Position, []roomlog.Entry, error)
}

// setup returns two logs on one store, as two replicas see it, a bus
// endpoint that receives their publications, and a function that makes the
// store forget a room.
type setup func(t *testing.T, history int) (a, b log, sub bus.Bus, drop func(room string))

func memorySetup(t *testing.T, history int) (log, log, bus.Bus, func(string)) {
	m := bus.NewMemory()
	l := roomlog.Shared(m, roomlog.MemoryOptions{History: history})
	if again := roomlog.Shared(m, roomlog.MemoryOptions{}); again != l {
		t.Fatal("Shared returned two logs for one bus")
	}
	return l, l, m.Endpoint(), l.Drop
}

func redisSetup(t *testing.T, history int) (log, log, bus.Bus, func(string)) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	open := func() *roomlog.Redis {
		l, err := roomlog.NewRedis(ctx, roomlog.RedisOptions{URL: srv.URL(), History: history, TTL: time.Hour})
		if err != nil {
			t.Fatalf("NewRedis: %v", err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	b, err := bus.NewRedis(ctx, bus.RedisOptions{URL: srv.URL()})
	if err != nil {
		t.Fatalf("bus: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	drop := func(room string) {
		if err := admin.Del(context.Background(), "wsgate:{"+room+"}:meta", "wsgate:{"+room+"}:log").Err(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	return open(), open(), b, drop
}

var setups = []struct {
	name string
	s    setup
}{
	{"memory", memorySetup},
	{"redis", redisSetup},
}

// TestDenseOffsets has two logs append to one room concurrently: the
// offsets handed out are exactly 1..n, every publication carries its entry,
// and Range returns them all in order.
func TestDenseOffsets(t *testing.T) {
	for _, tc := range setups {
		t.Run(tc.name, func(t *testing.T) {
			a, b, sub, _ := tc.s(t, 1000)
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			var mu sync.Mutex
			published := map[uint64]string{}
			got := make(chan struct{}, 1000)
			s, err := sub.Subscribe(ctx, "dense", func(_ string, msg []byte) {
				e, err := roomlog.ParseMessage(msg)
				if err != nil {
					t.Errorf("published %q: %v", msg, err)
					return
				}
				mu.Lock()
				published[e.Offset] = string(e.Data)
				mu.Unlock()
				got <- struct{}{}
			})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			defer s.Close()

			const per = 100
			offsets := make(chan uint64, 2*per)
			var wg sync.WaitGroup
			for w, l := range []log{a, b} {
				wg.Go(func() {
					for i := range per {
						p, err := l.Append(ctx, "dense", fmt.Appendf(nil, "w%d-%d", w, i))
						if err != nil {
							t.Errorf("append: %v", err)
							return
						}
						offsets <- p.Offset
					}
				})
			}
			wg.Wait()
			close(offsets)
			seen := make([]bool, 2*per+1)
			for o := range offsets {
				if o == 0 || o > 2*per || seen[o] {
					t.Fatalf("offset %d out of range or handed out twice", o)
				}
				seen[o] = true
			}
			for range 2 * per {
				select {
				case <-got:
				case <-ctx.Done():
					t.Fatalf("only %d publications", len(published))
				}
			}
			pos, entries, err := a.Range(ctx, "dense", 0)
			if err != nil {
				t.Fatalf("range: %v", err)
			}
			if pos.Offset != 2*per || len(entries) != 2*per {
				t.Fatalf("position %+v, %d entries", pos, len(entries))
			}
			mu.Lock()
			defer mu.Unlock()
			for i, e := range entries {
				if e.Offset != uint64(i+1) || e.Epoch != pos.Epoch || published[e.Offset] != string(e.Data) {
					t.Fatalf("entry %d = %+v, published %q", i, e, published[e.Offset])
				}
			}
			if p2, _ := b.Position(ctx, "dense"); p2 != pos {
				t.Fatalf("position from b %+v, from a %+v", p2, pos)
			}
		})
	}
}

func TestRangeTrimAndEpoch(t *testing.T) {
	for _, tc := range setups {
		t.Run(tc.name, func(t *testing.T) {
			const history = 10
			l, _, _, drop := tc.s(t, history)
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()

			empty, err := l.Position(ctx, "r")
			if err != nil || empty.Offset != 0 || len(empty.Epoch) != roomlog.EpochLen {
				t.Fatalf("position of a new room = %+v, %v", empty, err)
			}
			for i := range 3 {
				if _, err := l.Append(ctx, "r", []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			for _, tr := range []struct {
				after uint64
				want  int
			}{{0, 3}, {1, 2}, {3, 0}, {99, 0}, {^uint64(0), 0}} {
				pos, es, err := l.Range(ctx, "r", tr.after)
				if err != nil || pos.Epoch != empty.Epoch || pos.Offset != 3 || len(es) != tr.want {
					t.Fatalf("Range(after %d) = %+v, %d entries, %v; want %d", tr.after, pos, len(es), err, tr.want)
				}
				if tr.want > 0 && es[0].Offset != tr.after+1 {
					t.Fatalf("Range(after %d) starts at %d", tr.after, es[0].Offset)
				}
			}

			// Far past the history: the oldest entries are trimmed, at
			// least history are kept, offsets stay dense at the end.
			const n = 1000
			for i := range n {
				if _, err := l.Append(ctx, "r", []byte(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
			}
			pos, es, err := l.Range(ctx, "r", 0)
			if err != nil || pos.Offset != n+3 {
				t.Fatalf("after trim %+v %v", pos, err)
			}
			if len(es) < history || len(es) >= n || es[0].Offset == 1 || es[len(es)-1].Offset != n+3 {
				t.Fatalf("after trim: %d entries from %d", len(es), es[0].Offset)
			}

			// The store loses the room: a new epoch from offset 1.
			drop("r")
			p, err := l.Append(ctx, "r", []byte("again"))
			if err != nil || p.Offset != 1 || p.Epoch == empty.Epoch {
				t.Fatalf("append after loss = %+v, %v", p, err)
			}
			if _, es, _ := l.Range(ctx, "r", 0); len(es) != 1 || !bytes.Equal(es[0].Data, []byte("again")) {
				t.Fatalf("range after loss = %v", es)
			}
		})
	}
}

func TestRedisTTL(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	l, err := roomlog.NewRedis(ctx, roomlog.RedisOptions{URL: srv.URL(), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(ctx, "ttl", []byte("x")); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	for _, k := range []string{"wsgate:{ttl}:meta", "wsgate:{ttl}:log"} {
		d, err := admin.PTTL(ctx, k).Result()
		if err != nil || d <= 0 || d > time.Minute {
			t.Fatalf("PTTL %s = %s, %v", k, d, err)
		}
	}
	// The scripts survive SCRIPT FLUSH (a restarted server): EVALSHA falls
	// back to EVAL.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Append(ctx, "ttl", []byte("y")); err != nil || p.Offset != 2 {
		t.Fatalf("append after SCRIPT FLUSH = %+v, %v", p, err)
	}
}

func TestMemoryExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	m := bus.NewMemory()
	l := roomlog.NewMemory(m.Endpoint(), roomlog.MemoryOptions{TTL: time.Minute, Now: func() time.Time { return now }})
	ctx := context.Background()
	p1, _ := l.Append(ctx, "a", []byte("x"))
	now = now.Add(2 * time.Minute)
	p2, _ := l.Append(ctx, "a", []byte("y"))
	if p2.Offset != 1 || p2.Epoch == p1.Epoch {
		t.Fatalf("after expiry %+v, before %+v", p2, p1)
	}
	_, _ = l.Append(ctx, "b", nil)
	now = now.Add(2 * time.Minute)
	for range 4 {
		_, _ = l.Append(ctx, "c", nil)
	}
	if n := l.Rooms(); n != 1 {
		t.Fatalf("rooms held = %d, want 1 (the expired ones swept)", n)
	}
	_ = l.Close()
	if _, err := l.Append(ctx, "c", nil); err != roomlog.ErrClosed {
		t.Fatalf("append after close: %v", err)
	}
}
