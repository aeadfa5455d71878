package sharedcount

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/internal/redistest"
)

// obs records a sharer's reports.
type obs struct {
	mu                sync.Mutex
	ok, failed, peers int
	fallback          bool
	fallbacks         int
}

func (o *obs) Exchanged(_ string, ok bool, peers int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ok {
		o.ok++
		o.peers = peers
	} else {
		o.failed++
	}
}

func (o *obs) Fallback(_ string, on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fallback = on
	if on {
		o.fallbacks++
	}
}

func (o *obs) state() (fallback bool, fallbacks, peers int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fallback, o.fallbacks, o.peers
}

var addrs = []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}

// gateway is one side's nodes (the same addresses, nodes of their own, as
// two gateway processes have) and its sharer.
type gateway struct {
	nodes []*balancer.Node
	s     *Sharer
	o     *obs
}

func startGateway(t *testing.T, url, id string) *gateway {
	t.Helper()
	g := &gateway{o: &obs{}}
	for _, a := range addrs {
		g.nodes = append(g.nodes, balancer.NewNode(a, 1, 0))
	}
	s, err := Start(Config{URL: url, Pool: "relay", ID: id, KeyPrefix: "test:counts", Interval: 50 * time.Millisecond,
		Nodes: func() []*balancer.Node { return g.nodes }, Observer: g.o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.s = s
	t.Cleanup(func() { s.Stop(true); <-s.Done() })
	return g
}

// others returns the nodes' others counts.
func (g *gateway) others() []int {
	out := make([]int, len(g.nodes))
	for i, n := range g.nodes {
		out[i] = n.Others()
	}
	return out
}

// waitOthers polls until g's nodes show want as others, for at most 10s
// (200 exchanges).
func waitOthers(t *testing.T, g *gateway, want []int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := g.others()
		if equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: others %v, want %v", what, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func hold(t *testing.T, n *balancer.Node, k int) []*balancer.Lease {
	t.Helper()
	var ls []*balancer.Lease
	for range k {
		l, ok := n.TryAcquire()
		if !ok {
			t.Fatal("lease refused")
		}
		ls = append(ls, l)
	}
	return ls
}

// TestSharedCountsAcrossGateways checks, on a real redis-server, that
// gateway B's nodes count gateway A's leases (and C's, summed), that B's
// least_conn then sends a new client to the node the others hold least,
// that with Redis killed B falls back to its own counts (0) once the
// counts age out, logged once, and takes them up again when Redis is back,
// and that A's key goes with A.
func TestSharedCountsAcrossGateways(t *testing.T) {
	rs := redistest.Start(t)
	a := startGateway(t, rs.URL(), "gw-a")
	b := startGateway(t, rs.URL(), "gw-b")
	c := startGateway(t, rs.URL(), "gw-c")

	held := append(hold(t, a.nodes[0], 5), hold(t, a.nodes[1], 3)...)
	held = append(held, hold(t, c.nodes[0], 2)...)
	waitOthers(t, b, []int{7, 3, 0}, "B sees A's and C's leases")
	waitOthers(t, a, []int{2, 0, 0}, "A sees C's")
	if _, _, peers := b.o.state(); peers != 2 {
		t.Fatalf("B saw %d peers, want 2", peers)
	}
	var lc balancer.LeastConn
	if n := lc.Pick(b.nodes); n != b.nodes[2] {
		t.Fatalf("B picked %s, want %s (the node the others hold least)", n.Addr(), addrs[2])
	}

	// Redis gone: the counts last received stay for 4 intervals, then B
	// balances by its own (none).
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	waitOthers(t, b, []int{0, 0, 0}, "B falls back to its own counts with Redis down")
	if fb, n, _ := b.o.state(); !fb || n != 1 {
		t.Fatalf("B fallback %v after %d fallbacks, want true after 1", fb, n)
	}
	if l, ok := b.nodes[0].TryAcquire(); !ok { // picks still work: nothing waits on Redis
		t.Fatal("B refused a lease with Redis down")
	} else {
		l.Release()
	}

	// Back: an empty Redis (the script is loaded again) fills up at the
	// next exchanges.
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	waitOthers(t, b, []int{7, 3, 0}, "B sees the others again after Redis restarted")
	if fb, n, _ := b.o.state(); fb || n != 1 {
		t.Fatalf("B fallback %v after %d fallbacks, want false after 1", fb, n)
	}

	// A stops and deletes its key: B counts only C's.
	a.s.Stop(true)
	<-a.s.Done()
	waitOthers(t, b, []int{2, 0, 0}, "B after A left")
	for _, n := range a.nodes {
		if n.Others() != 0 {
			t.Fatalf("A's node %s others %d after Stop, want 0", n.Addr(), n.Others())
		}
	}
	for _, l := range held {
		l.Release()
	}
	waitOthers(t, b, []int{0, 0, 0}, "B after every lease was released")
	for _, g := range []*gateway{a, b, c} {
		for _, n := range g.nodes {
			if n.Live() != 0 {
				t.Fatalf("node %s live %d, want 0", n.Addr(), n.Live())
			}
		}
	}
}

// TestSharerReplaced checks that a sharer started with its predecessor
// waits for it to finish, and that the predecessor's exit (which zeroes
// the others) comes before the successor's counts.
func TestSharerReplaced(t *testing.T) {
	rs := redistest.Start(t)
	a := startGateway(t, rs.URL(), "gw-a")
	b := startGateway(t, rs.URL(), "gw-b")
	held := hold(t, a.nodes[1], 4)
	defer func() {
		for _, l := range held {
			l.Release()
		}
	}()
	waitOthers(t, b, []int{0, 4, 0}, "B sees A")
	b.s.Stop(false)
	next, err := Start(Config{URL: rs.URL(), Pool: "relay", ID: "gw-b", KeyPrefix: "test:counts", Interval: 50 * time.Millisecond,
		Nodes: func() []*balancer.Node { return b.nodes }}, b.s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Stop(true); <-next.Done() })
	<-b.s.Done()
	waitOthers(t, b, []int{0, 4, 0}, "B's new sharer sees A")
}

// TestEncodeDecode checks the value format, and that Decode skips what
// it cannot read.
func TestEncodeDecode(t *testing.T) {
	nodes := []*balancer.Node{balancer.NewNode("127.0.0.1:1", 1, 0), balancer.NewNode("[::1]:2", 1, 0)}
	l, _ := nodes[1].TryAcquire()
	defer l.Release()
	v := Encode(nodes)
	if v != "127.0.0.1:1 0\n[::1]:2 1\n" {
		t.Fatalf("Encode = %q", v)
	}
	got := map[string]int{"[::1]:2": 2}
	Decode(v+"junk\nx -3\ny 9x\nz 4", got)
	want := map[string]int{"127.0.0.1:1": 0, "[::1]:2": 3, "z": 4}
	if len(got) != len(want) {
		t.Fatalf("Decode = %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("Decode = %v, want %v", got, want)
		}
	}
}

// TestPeersBounded plants, on a real redis-server, what a faulty gateway
// (or anyone who can write to Redis) might: in one pool a peer claiming
// 2^40 tunnels on the first node, in another 300 peers holding one tunnel
// each on the second. A peer counts at most the node's cap (10 here) and
// at most MaxPeers peers count, so no node looks far busier than the
// peers' gateways could make it.
func TestPeersBounded(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ctx := context.Background()
	plant := func(pool, id, v string) {
		t.Helper()
		set := "test:counts:{" + pool + "}"
		if err := c.Set(ctx, set+":"+id, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SAdd(ctx, set, id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	plant("huge", "liar", addrs[0]+" 1099511627776\n"+strings.Repeat("junk 5\n", 100))
	for i := range 300 {
		plant("many", fmt.Sprintf("peer-%d", i), addrs[1]+" 1\n")
	}
	for _, tc := range []struct {
		pool   string
		others []int
		peers  int
	}{{"huge", []int{10, 0, 0}, 1}, {"many", []int{0, 10, 0}, MaxPeers}} {
		g := &gateway{o: &obs{}}
		for _, a := range addrs {
			g.nodes = append(g.nodes, balancer.NewNode(a, 1, 10))
		}
		if tc.pool == "many" {
			g.nodes[1].SetMaxConns(0) // unlimited: the peers' bound shows
			tc.others[1] = MaxPeers
		}
		s, err := Start(Config{URL: rs.URL(), Pool: tc.pool, ID: "gw", KeyPrefix: "test:counts", Interval: 50 * time.Millisecond,
			Nodes: func() []*balancer.Node { return g.nodes }, Observer: g.o}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(true); <-s.Done() })
		waitOthers(t, g, tc.others, tc.pool)
		if _, _, peers := g.o.state(); peers != tc.peers {
			t.Fatalf("%s: %d peers counted, want %d", tc.pool, peers, tc.peers)
		}
	}
}

// TestRemovedNodesForgetOthers checks that a node the pool no longer lists
// (a reload removed it, or the whole pool) does not keep the others count
// the last exchange gave it: it may come back in a pool that does not
// share, whose least_conn would then stay skewed by it.
func TestRemovedNodesForgetOthers(t *testing.T) {
	rs := redistest.Start(t)
	a := startGateway(t, rs.URL(), "gw-a")
	for _, l := range append(hold(t, a.nodes[0], 3), hold(t, a.nodes[1], 2)...) {
		defer l.Release()
	}

	var mu sync.Mutex
	var listed []*balancer.Node
	for _, addr := range addrs[:2] {
		listed = append(listed, balancer.NewNode(addr, 1, 0))
	}
	kept, removed := listed[0], listed[1]
	b, err := Start(Config{URL: rs.URL(), Pool: "relay", ID: "gw-b", KeyPrefix: "test:counts", Interval: 50 * time.Millisecond,
		Nodes: func() []*balancer.Node { mu.Lock(); defer mu.Unlock(); return slices.Clone(listed) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitNode := func(n *balancer.Node, want int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n.Others() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: others %d, want %d", what, n.Others(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitNode(kept, 3, "kept node, before the removal")
	waitNode(removed, 2, "node to remove, before the removal")

	mu.Lock()
	listed = listed[:1] // a reload removed the second node
	mu.Unlock()
	waitNode(removed, 0, "removed node")
	if kept.Others() != 3 {
		t.Fatalf("kept node: others %d, want 3", kept.Others())
	}

	mu.Lock()
	listed = nil // the pool is gone
	mu.Unlock()
	b.Stop(true)
	<-b.Done()
	if kept.Others() != 0 {
		t.Fatalf("node of a pool that stopped sharing: others %d, want 0", kept.Others())
	}
}
