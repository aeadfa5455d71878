package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/internal/discovery/dnstest"
	"github.com/wsgate/wsgate/internal/redistest"
)

func lookup(t *testing.T, src Source) ([]Node, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := src.Lookup(ctx)
	return normalize(nodes), err
}

// TestDNSLookups resolves A, AAAA and SRV answers from a server the test
// controls, and tells a missing name (ErrEmpty) from a failing server.
func TestDNSLookups(t *testing.T) {
	dns := dnstest.Start(t)
	dns.SetA("relays.wsgate.test", "127.0.0.2", "127.0.0.3", "::1")
	dns.SetA("r1.wsgate.test", "127.0.0.4")
	dns.SetA("r2.wsgate.test", "127.0.0.5")
	dns.SetSRV("_ws._tcp.relays.wsgate.test",
		dnstest.SRV{Priority: 0, Weight: 30, Port: 7001, Target: "r1.wsgate.test"},
		dnstest.SRV{Priority: 0, Weight: 5000, Port: 7002, Target: "r2.wsgate.test"},
		dnstest.SRV{Priority: 1, Weight: 1, Port: 7003, Target: "r2.wsgate.test"}, // a backup: left out
		dnstest.SRV{Priority: 0, Weight: 0, Port: 7004, Target: "gone.wsgate.test"})

	got, err := lookup(t, NewDNS("relays.wsgate.test.", 7000, dns.Addr))
	want := []Node{{"127.0.0.2:7000", 1}, {"127.0.0.3:7000", 1}, {"[::1]:7000", 1}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("A/AAAA: %v %v, want %v", got, err, want)
	}
	got, err = lookup(t, NewDNS("_ws._tcp.relays.wsgate.test.", 0, dns.Addr))
	want = []Node{{"127.0.0.4:7001", 30}, {"127.0.0.5:7002", 1000}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("SRV: %v %v, want %v", got, err, want)
	}
	if _, err := lookup(t, NewDNS("missing.wsgate.test.", 7000, dns.Addr)); !errors.Is(err, ErrEmpty) {
		t.Fatalf("missing name: %v, want ErrEmpty", err)
	}
	dns.Fail(true)
	if _, err := lookup(t, NewDNS("relays.wsgate.test.", 7000, dns.Addr)); err == nil || errors.Is(err, ErrEmpty) {
		t.Fatalf("SERVFAIL: %v, want a lookup error", err)
	}
}

// fakeSource answers what the test sets.
type fakeSource struct {
	mu    sync.Mutex
	nodes []Node
	err   error
	n     int
}

func (f *fakeSource) set(err error, nodes ...Node) {
	f.mu.Lock()
	f.nodes, f.err = nodes, err
	f.mu.Unlock()
}

func (f *fakeSource) Lookup(context.Context) ([]Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return slices.Clone(f.nodes), f.err
}

// watchFake watches src every 5ms until the test ends, and returns the
// watcher, the sets it applies and the results of its lookups.
func watchFake(t *testing.T, src Source) (*Watcher, chan []Node, chan string) {
	applied := make(chan []Node, 10)
	results := make(chan string, 1000)
	w := Watch(src, Options{
		Interval: 5 * time.Millisecond,
		Apply:    func(n []Node) error { applied <- n; return nil },
		Observe:  func(r string, _ int) { results <- r },
	})
	t.Cleanup(w.Stop)
	return w, applied, results
}

// TestWatcherKeepsLastGoodSet applies each new set once and keeps the last
// one through failures and empty answers.
func TestWatcherKeepsLastGoodSet(t *testing.T) {
	src := &fakeSource{}
	src.set(nil, Node{"b:1", 1}, Node{"a:1", 0})
	w, applied, results := watchFake(t, src)
	if got := <-applied; !slices.Equal(got, []Node{{"a:1", 1}, {"b:1", 1}}) {
		t.Fatalf("first set %v", got)
	}
	waitResult := func(want string) {
		t.Helper()
		for r := range results {
			if r == want {
				return
			}
		}
	}
	src.set(errors.New("server down"))
	waitResult(ResultError)
	src.set(nil)
	waitResult(ResultEmpty)
	src.set(nil, Node{"a:1", 1}, Node{"b:1", 1}) // the same set: nothing to apply
	waitResult(ResultOK)
	waitResult(ResultOK)
	src.set(nil, Node{"a:1", 1})
	if got := <-applied; !slices.Equal(got, []Node{{"a:1", 1}}) {
		t.Fatalf("second set %v", got)
	}
	w.Stop()
	<-w.Done()
	if len(applied) != 0 {
		t.Fatalf("applied again: %v", <-applied)
	}
}

// TestParseKey pins which Redis keys name a node.
func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key, addr string
		ok        bool
	}{
		{"wsgate:relays:127.0.0.1:7001", "127.0.0.1:7001", true},
		{"wsgate:relays:[::1]:7001", "[::1]:7001", true},
		{"wsgate:relays:relay-0.relay:7001", "relay-0.relay:7001", true},
		{"wsgate:relays:127.0.0.1", "", false},
		{"wsgate:relays:127.0.0.1:0", "", false},
		{"wsgate:relays:127.0.0.1:65536", "", false},
		{"wsgate:relays:127.0.0.1:07001", "", false},
		{"wsgate:relays::7001", "", false},
		{"wsgate:relays:a b:7001", "", false},
		{"wsgate:relaysx:127.0.0.1:7001", "", false},
		{"other:127.0.0.1:7001", "", false},
		{"wsgate:relays", "", false},
	} {
		addr, ok := ParseKey("wsgate:relays", tc.key)
		if addr != tc.addr || ok != tc.ok {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, %v", tc.key, addr, ok, tc.addr, tc.ok)
		}
	}
}

// FuzzParseKey checks that a key ParseKey accepts round-trips through Key.
func FuzzParseKey(f *testing.F) {
	for _, k := range []string{"p:127.0.0.1:7001", "p:[::1]:1", "p:h:65535", "p::", "p:[x]:1", "p:a:b:c"} {
		f.Add("p", k)
	}
	f.Fuzz(func(t *testing.T, prefix, key string) {
		addr, ok := ParseKey(prefix, key)
		if !ok {
			return
		}
		if Key(prefix, addr) != key {
			t.Fatalf("Key(%q, %q) = %q, not %q", prefix, addr, Key(prefix, addr), key)
		}
	})
}

// TestRedisLookup scans a real redis-server: keys under the prefix (its
// glob characters taken literally), and nothing else.
func TestRedisLookup(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"r[1]*:127.0.0.1:7001", "r[1]*:127.0.0.1:7002", "r[1]*:bad", "r1x:127.0.0.1:7003", "other:127.0.0.1:7004"} {
		if err := c.Set(ctx, k, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 250 { // several SCAN pages
		c.Set(ctx, "noise:"+string(rune('a'+i%26))+time.Duration(i).String(), "1", time.Minute)
	}
	src, err := NewRedis(rs.URL(), "r[1]*")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got, err := lookup(t, src)
	want := []Node{{"127.0.0.1:7001", 1}, {"127.0.0.1:7002", 1}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("lookup %v %v, want %v", got, err, want)
	}
	_ = rs.Kill()
	if _, err := lookup(t, src); err == nil {
		t.Fatal("lookup with Redis down succeeded")
	}
}

// TestWatcherRefusesTooManyNodes keeps the last good set when an answer
// names more than MaxNodes nodes, and takes an answer of exactly
// MaxNodes.
func TestWatcherRefusesTooManyNodes(t *testing.T) {
	many := func(n int) []Node {
		out := make([]Node, n)
		for i := range out {
			out[i] = Node{fmt.Sprintf("10.0.%d.%d:7001", i/256, i%256), 1}
		}
		return out
	}
	src := &fakeSource{}
	src.set(nil, Node{"a:1", 1})
	_, applied, results := watchFake(t, src)
	if got := <-applied; len(got) != 1 {
		t.Fatalf("first set %v", got)
	}
	timeout := time.After(10 * time.Second)
	src.set(nil, many(MaxNodes+1)...)
	for r := ResultOK; r != ResultError; {
		select {
		case r = <-results:
		case got := <-applied:
			t.Fatalf("an answer of %d nodes applied", len(got))
		case <-timeout:
			t.Fatal("no failed lookup")
		}
	}
	src.set(nil, many(MaxNodes)...)
	select {
	case got := <-applied:
		if len(got) != MaxNodes {
			t.Fatalf("applied %d nodes, want %d", len(got), MaxNodes)
		}
	case <-timeout:
		t.Fatal("an answer of MaxNodes nodes not applied")
	}
}

// TestRedisLookupBounded refuses a prefix holding more than MaxNodes keys
// on a real redis-server (100,000 here), and reads exactly MaxNodes.
func TestRedisLookupBounded(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ctx := context.Background()
	fill := func(prefix string, n int) {
		t.Helper()
		for start := 0; start < n; start += 5000 {
			args := make([]any, 0, 10000)
			for i := start; i < min(n, start+5000); i++ {
				args = append(args, Key(prefix, fmt.Sprintf("10.%d.%d.%d:7001", i>>16, (i>>8)&255, i&255)), "1")
			}
			if err := c.MSet(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill("many", 100_000)
	fill("enough", MaxNodes)
	for _, tc := range []struct {
		prefix string
		nodes  int
		err    error
	}{{"many", 0, ErrTooMany}, {"enough", MaxNodes, nil}} {
		src, err := NewRedis(rs.URL(), tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lookup(t, src)
		src.Close()
		if len(got) != tc.nodes || !errors.Is(err, tc.err) {
			t.Fatalf("%s: %d nodes, %v; want %d, %v", tc.prefix, len(got), err, tc.nodes, tc.err)
		}
	}
}

// flapSource answers a set that changes at every lookup, in turn.
type flapSource struct {
	mu    sync.Mutex
	n     int
	turns [][]Node
}

func (f *flapSource) Lookup(context.Context) ([]Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return slices.Clone(f.turns[f.n%len(f.turns)]), nil
}

func (f *flapSource) lookups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *flapSource) set(turns ...[]Node) {
	f.mu.Lock()
	f.turns = turns
	f.mu.Unlock()
}

// TestWatcherMisses keeps a node that an answer leaves out until Misses
// answers in a row have: a source answering A, B, A, B... (a DNS server
// rotating a subset of its records) removes no node, and a node left out
// for good leaves at the Misses-th answer without it.
func TestWatcherMisses(t *testing.T) {
	a, b := Node{"a:1", 1}, Node{"b:1", 1}
	src := &flapSource{}
	src.set([]Node{a}, []Node{b})
	applied := make(chan []Node, 100)
	w := Watch(src, Options{
		Interval: 2 * time.Millisecond,
		Misses:   3,
		Apply:    func(n []Node) error { applied <- n; return nil },
	})
	defer w.Stop()
	timeout := time.After(10 * time.Second)
	next := func() []Node {
		t.Helper()
		select {
		case got := <-applied:
			return got
		case <-timeout:
			t.Fatal("no set applied")
			return nil
		}
	}
	first := next()
	if got := next(); !slices.Equal(got, []Node{a, b}) {
		t.Fatalf("after %v, applied %v; want both", first, got)
	}
	for start := src.lookups(); src.lookups() < start+30; {
		select {
		case got := <-applied:
			t.Fatalf("a flapping answer applied %v", got)
		case <-timeout:
			t.Fatal("lookups stopped")
		case <-time.After(time.Millisecond):
		}
	}
	// Both answered for a while: no miss is counted when a starts missing.
	src.set([]Node{a, b})
	for start := src.lookups(); src.lookups() < start+2; {
		select {
		case <-timeout:
			t.Fatal("lookups stopped")
		case <-time.After(time.Millisecond):
		}
	}
	start := src.lookups()
	src.set([]Node{b})
	if got := next(); !slices.Equal(got, []Node{b}) {
		t.Fatalf("applied %v, want only b", got)
	}
	if n := src.lookups() - start; n < 3 {
		t.Fatalf("a left after %d answers without it, want 3", n)
	}
}

// TestRedisLookupSilentServer looks up a server that accepts connections
// and never answers: the lookup ends with its context (100ms here), not
// after go-redis's own timeouts (5s), so a hung Redis holds no lookup
// past the interval. The test waits at most 3s for it.
func TestRedisLookupSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	src, err := NewRedis("redis://"+ln.Addr().String(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := src.Lookup(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a silent server answered")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the lookup outlived its context by seconds")
	}
}
