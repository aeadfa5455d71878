package gateway

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/discovery"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// TestDiscoveryAllow runs a Redis-discovered pool held to allow on real
// relays and a real redis-server. Keys name an allowed relay, a relay
// outside allow, 169.254.169.254, and a host name (localhost) whose
// address is outside allow, at a listener that counts connections. The
// first relay alone takes clients; the host name enters the pool but is
// never connected to, by probe or tunnel, until a reload widens allow. A
// reload that narrows allow drains the nodes it leaves out at once, even
// the last one up, and answers naming only refused nodes count as empty.
func TestDiscoveryAllow(t *testing.T) {
	rs := redistest.Start(t)
	mem := bus.NewMemory()
	t.Cleanup(func() { _ = mem.Close() })
	serve := func(id, host string) string {
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		r := relay.New(relay.Options{ID: id, Bus: mem.Endpoint(), Logger: quietLog()})
		go func() { _ = r.Serve(ln) }()
		t.Cleanup(func() { _ = r.Close(context.Background()) })
		return ln.Addr().String()
	}
	a, b := serve("relay-a", "127.0.0.2"), serve("relay-b", "127.0.0.3")
	trap, trapped := testproc.CountingListener(t, "127.0.0.1")
	_, trapPort, _ := net.SplitHostPort(trap.Addr().String())
	named := net.JoinHostPort("localhost", trapPort)
	cfg := func(allow string) *conf.Config {
		t.Helper()
		c, err := conf.Parse("allow.toml", []byte(fmt.Sprintf(redisDiscoveryCfg, rs.URL())+"  allow = "+allow+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := startGateway(t, fmt.Sprintf(redisDiscoveryCfg, rs.URL())+"  allow = [\"127.0.0.2/32\"]\n")
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	for _, k := range []string{a, b, "169.254.169.254:80", named} {
		if err := c.Set(context.Background(), discovery.Key("wsgate:test", k), "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, srv: s, gw: s.Addr().String()}
	lookups := func(result string) float64 {
		return counter(e.scrape(), "wsgate_discovery_lookups_total", "result", result)
	}
	waitUntil(t, func() bool { st, ok := s.nodeState("relay", a); return ok && st == balancer.StateUp })
	waitUntil(t, func() bool { _, ok := s.nodeState("relay", named); return ok })
	before := lookups("ok")
	waitUntil(t, func() bool { return lookups("ok") >= before+5 }) // 500ms: ten probe intervals
	if st, _ := s.nodeState("relay", named); st != balancer.StateDown {
		t.Fatalf("%s is %v; its address is outside allow", named, st)
	}
	for _, addr := range []string{b, "169.254.169.254:80"} {
		if _, ok := s.nodeState("relay", addr); ok {
			t.Fatalf("%s was taken into the pool", addr)
		}
	}
	for i := range 6 {
		cc, replica := e.helloReplica(fmt.Sprintf("/room/allow%d", i))
		if replica != "relay-a" {
			t.Fatalf("client on %q, want relay-a", replica)
		}
		cc.Close()
	}
	if n := trapped.Load(); n != 0 {
		t.Fatalf("%s (localhost) was connected to %d times", named, n)
	}
	e.waitZero()

	// Widened, allow takes relay-b in, and the probes of the host name
	// now connect; the link-local key stays out whatever allow says.
	if err := s.Apply(cfg(`["127.0.0.0/8", "169.254.0.0/16"]`)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { st, ok := s.nodeState("relay", b); return ok && st == balancer.StateUp })
	waitUntil(t, func() bool { return trapped.Load() > 0 })
	if _, ok := s.nodeState("relay", "169.254.169.254:80"); ok {
		t.Fatal("a link-local node was taken into the pool")
	}

	// Narrowed, allow drains the node it now leaves out at once: its
	// client is told 1001. Least connections puts two clients one on
	// each relay (the host name's node is down).
	c1, r1 := e.helloReplica("/room/narrow-1")
	defer c1.Close()
	c2, r2 := e.helloReplica("/room/narrow-2")
	defer c2.Close()
	onA, onB := c1, c2
	switch {
	case r1 == r2:
		t.Fatalf("two clients both on %q", r1)
	case r1 == "relay-b":
		onA, onB = c2, c1
	}
	if err := s.Apply(cfg(`["127.0.0.3/32"]`)); err != nil {
		t.Fatal(err)
	}
	// Gone with the reload itself, before the new lookup loop answers.
	if _, ok := s.nodeState("relay", a); ok {
		t.Fatalf("%s still in the pool after the reload that left it out", a)
	}
	expectClose(t, onA, 1001)
	// Left out by allow, every node given by address goes, even the
	// last one up; the host name stays, down, its connects refused.
	if err := s.Apply(cfg(`["127.0.0.9/32"]`)); err != nil {
		t.Fatal(err)
	}
	expectClose(t, onB, 1001)
	if nodes := s.current().pools["relay"].Balancer.Nodes(); len(nodes) != 1 || nodes[0].Addr() != named || nodes[0].State() != balancer.StateDown {
		t.Fatalf("with every address outside allow, the pool has %v, want only %s, down", nodes, named)
	}
	// Without the host name's key, each answer names refused nodes only:
	// it counts as empty, and the pool keeps what it has.
	if err := c.Del(context.Background(), discovery.Key("wsgate:test", named)).Err(); err != nil {
		t.Fatal(err)
	}
	before = lookups("empty")
	waitUntil(t, func() bool { return lookups("empty") >= before+2 })
	if _, ok := s.nodeState("relay", named); !ok {
		t.Fatalf("an answer of refused nodes only took %s out of the pool", named)
	}
	e.waitZero()
}
