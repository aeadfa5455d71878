package acmecert

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/redistest"
)

// countMetrics counts the on-demand decisions by result.
type countMetrics struct {
	mu sync.Mutex
	on map[string]int
}

func (c *countMetrics) Ordered(bool) {}
func (c *countMetrics) Renewed(bool) {}
func (c *countMetrics) OnDemand(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on[result]++
}

// redisCalls is how many times the Redis at addr has run cmd.
func redisCalls(t *testing.T, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestStrangerNameLookedUpOnce pins the negative lookup's memory: with
// the on_demand_rate bucket empty, 40 handshakes for a stranger's name
// look it up in a real Redis storage once, not 40 times (two round trips
// each), and are all refused over the rate. Before, each looked it up.
func TestStrangerNameLookedUpOnce(t *testing.T) {
	srv := redistest.Start(t)
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	t.Cleanup(ask.Close)
	metrics := &countMetrics{on: map[string]int{}}
	m, err := New(&conf.ACME{
		Directory: "https://127.0.0.1:1/directory", Email: "ops@example.test", Storage: srv.URL(),
		OnDemand: true, Ask: ask.URL, AskTimeout: conf.Duration{Duration: 5 * time.Second},
		OnDemandRate: 1, OnDemandBurst: 1,
	}, Options{Log: slog.New(slog.DiscardHandler), Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	m.bucket.take(time.Now()) // the burst is spent: every decision below is over the rate
	before := redisCalls(t, c, "hmget")
	const handshakes = 40
	for range handshakes {
		if err := m.decide(ctx, "stranger.example.test"); err == nil {
			t.Fatal("a stranger's name was approved")
		}
	}
	lookups := redisCalls(t, c, "hmget") - before
	metrics.mu.Lock()
	rate, refused := metrics.on["rate"], metrics.on["refused"]
	metrics.mu.Unlock()
	t.Logf("%d handshakes: %d storage lookups, %d over the rate, %d asked and refused", handshakes, lookups, rate, refused)
	// A token may come back during the loop (1 a second): its decision
	// asks the ask URL, not the storage.
	if lookups < 1 || lookups > 2 {
		t.Fatalf("%d handshakes for one stranger's name made %d storage lookups, want 1 (a second if absentFor passed)", handshakes, lookups)
	}
	if rate+refused != handshakes {
		t.Fatalf("decisions: %d over the rate, %d refused by ask; want %d in all", rate, refused, handshakes)
	}
}

// TestAbsentNames pins the memory of names found absent: each holds for
// absentFor, and the least recently noted goes first once max are
// remembered.
func TestAbsentNames(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAbsentNames(2)
	has := func(name string, now time.Time) bool { _, ok := a.get(name, now); return ok }
	a.note("a.test", struct{}{}, t0)
	if !has("a.test", t0.Add(absentFor-time.Second)) || has("a.test", t0.Add(absentFor)) {
		t.Error("a.test not remembered for exactly absentFor")
	}
	a.note("a.test", struct{}{}, t0)
	a.note("b.test", struct{}{}, t0)
	a.note("a.test", struct{}{}, t0)
	a.note("c.test", struct{}{}, t0) // b.test, noted least recently, goes
	if has("b.test", t0) || !has("a.test", t0) || !has("c.test", t0) {
		t.Error("the least recently noted name was not the one forgotten")
	}
	if len(a.byName) != 2 || a.order.Len() != 2 {
		t.Errorf("%d names, %d in order; want max (2)", len(a.byName), a.order.Len())
	}
}
