package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/discovery"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// TestNodePolicy pins which node addresses a discovered pool refuses,
// with and without pools.discovery.allow, and why.
func TestNodePolicy(t *testing.T) {
	open := newNodePolicy(conf.Discovery{Kind: "redis"})
	allow := newNodePolicy(conf.Discovery{Kind: "redis", Allow: []string{"10.0.0.0/8", "127.0.0.1", "fd00::/8"}})
	for _, c := range []struct {
		addr            string
		without, within string // the reason refused without allow, with allow; "" = taken
	}{
		{"10.1.2.3:7001", "", ""},
		{"127.0.0.1:7001", "", ""},
		{"127.0.0.2:7001", "", whyNotAllow},
		{"192.168.1.5:7001", "", whyNotAllow},
		{"[fd00::5]:7001", "", ""},
		{"[fd00:ec2::254]:80", "", ""}, // a metadata service at an ordinary address: only allow keeps it out
		{"100.100.100.200:80", "", whyNotAllow},
		{"[2001:db8::1]:7001", "", whyNotAllow},
		{"[::ffff:10.1.2.3]:7001", "", ""}, // IPv4-mapped, unmapped
		{"[::ffff:169.254.169.254]:80", whyNever, whyNever},
		{"169.254.169.254:80", whyNever, whyNever},      // a cloud's metadata service
		{"[64:ff9b::a9fe:a9fe]:80", whyNever, whyNever}, // 169.254.169.254 through NAT64
		{"[64:ff9b::a01:203]:7001", "", whyNotAllow},    // 10.1.2.3 through NAT64: not itself in allow
		{"[fe80::1]:7001", whyNever, whyNever},
		{"[fe80::1%eth0]:7001", whyZone, whyZone},
		{"[fd00::5%lo]:7001", whyZone, whyZone},
		{"[::%lo]:7001", whyZone, whyZone}, // connects to ::1: no zone passes
		{"0.0.0.0:7001", whyNever, whyNever},
		{"[::]:7001", whyNever, whyNever},
		{"224.0.0.1:7001", whyNever, whyNever},
		{"[ff02::1]:7001", whyNever, whyNever},
		{"255.255.255.255:7001", whyNever, whyNever},
		{"relay-0.relay:7001", "", ""}, // a host name: checked when dialed, on its address
	} {
		for _, k := range []struct {
			p    *nodePolicy
			want string
		}{{open, c.without}, {allow, c.within}} {
			err := k.p.checkNode(c.addr)
			var re *refusedAddrError
			switch {
			case k.want == "" && err != nil:
				t.Errorf("%s (allow %v): refused: %v", c.addr, k.p.allow, err)
			case k.want != "" && (!errors.As(err, &re) || re.why != k.want):
				t.Errorf("%s (allow %v): got %v, want refused: %s", c.addr, k.p.allow, err, k.want)
			}
		}
	}
	if p := newNodePolicy(conf.Discovery{}); p != nil || p.checkNode("169.254.169.254:80") != nil || p.addrCheck() != nil {
		t.Fatal("a pool without discovery is held to a policy")
	}
}

// countingListener listens on host, closes each connection it accepts,
// and counts them; it is closed when the test ends.
func countingListener(t *testing.T, host string) (net.Listener, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln, n
}

// TestDialerHoldsToPolicy dials through a pool dialer held to a policy,
// with and without source addresses: a refused address is never
// connected to (the listener accepts nothing), an allowed one is.
func TestDialerHoldsToPolicy(t *testing.T) {
	refused, accepts := countingListener(t, "127.0.0.1")
	allowed, _ := countingListener(t, "127.0.0.2")
	policy := newNodePolicy(conf.Discovery{Kind: "dns", Allow: []string{"127.0.0.2/32"}})
	for _, sources := range [][]string{nil, {"127.0.0.5"}} {
		d, err := newDialer("p", sources, 2*time.Second, quietLog(), nil)
		if err != nil {
			t.Fatal(err)
		}
		d.holdTo(policy)
		c, err := d.dial(allowed.Addr().String())
		if err != nil {
			t.Fatalf("sources %v: allowed address: %v", sources, err)
		}
		if sources != nil && !strings.HasPrefix(c.LocalAddr().String(), "127.0.0.5:") {
			t.Fatalf("dialed from %v, want source 127.0.0.5", c.LocalAddr())
		}
		c.Close()
		var re *refusedAddrError
		if _, err := d.dial(refused.Addr().String()); !errors.As(err, &re) || errors.Is(err, errLocalDial) {
			t.Fatalf("sources %v: refused address dialed: %v", sources, err)
		}
		// A host name is held to the address it resolves to.
		_, port, _ := net.SplitHostPort(refused.Addr().String())
		if _, err := d.dial(net.JoinHostPort("localhost", port)); err == nil {
			t.Fatalf("sources %v: localhost:%s dialed", sources, port)
		}
	}
	// A discovered pool's own dialer is held to its section's policy.
	cfg, err := conf.Parse("policy.toml", []byte(fmt.Sprintf(redisDiscoveryCfg, "redis://127.0.0.1:1")+"  allow = [\"127.0.0.2/32\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, _, _, err := newPool(&cfg.Pools[0], nil, balancer.NewRegistry(), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.health.Stop()
	var re *refusedAddrError
	if _, err := p.dial.dial(refused.Addr().String()); !errors.As(err, &re) {
		t.Fatalf("the pool's dialer dialed a refused address: %v", err)
	}
	if n := accepts.Load(); n != 0 {
		t.Fatalf("the refused address accepted %d connections", n)
	}
}

// fixedSource answers every lookup with the same nodes.
type fixedSource []discovery.Node

func (f fixedSource) Lookup(context.Context) ([]discovery.Node, error) { return f, nil }

// TestPolicySource checks an answer is filtered before the watcher sees
// it: refused nodes are left out and logged once per new set, and an
// answer naming only refused nodes is an empty one.
func TestPolicySource(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	policy := newNodePolicy(conf.Discovery{Kind: "redis", Allow: []string{"10.0.0.0/8"}})
	mixed := fixedSource{{Addr: "10.0.0.1:7001", Weight: 1}, {Addr: "169.254.169.254:80", Weight: 1}, {Addr: "192.168.0.1:7001", Weight: 1}}
	s := &policySource{src: mixed, policy: policy, log: log}
	for range 3 {
		nodes, err := s.Lookup(context.Background())
		if err != nil || len(nodes) != 1 || nodes[0].Addr != "10.0.0.1:7001" {
			t.Fatalf("got %v, %v; want only 10.0.0.1:7001", nodes, err)
		}
	}
	if n := strings.Count(logs.String(), "discovered nodes left out"); n != 2 {
		t.Fatalf("%d lines logged over three identical answers, want one per reason (2):\n%s", n, logs.String())
	}
	for _, want := range []string{whyNever, "169.254.169.254:80", whyNotAllow, "192.168.0.1:7001"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs.String())
		}
	}
	s.src = mixed[1:]
	if _, err := s.Lookup(context.Background()); !errors.Is(err, discovery.ErrEmpty) {
		t.Fatalf("an answer of refused nodes only: %v, want ErrEmpty", err)
	}
	// A flood of refused keys costs one bounded line.
	var flood fixedSource
	for i := range discovery.MaxNodes {
		flood = append(flood, discovery.Node{Addr: fmt.Sprintf("192.168.%d.%d:7001", i/250, 1+i%250), Weight: 1})
	}
	logs.Reset()
	s.src = flood
	if _, err := s.Lookup(context.Background()); !errors.Is(err, discovery.ErrEmpty) {
		t.Fatalf("an answer of %d refused nodes: %v, want ErrEmpty", len(flood), err)
	}
	line := logs.String()
	if n := strings.Count(line, "192.168."); n != maxLoggedNodes || !strings.Contains(line, fmt.Sprintf("count=%d", len(flood))) {
		t.Fatalf("the line names %d addresses, want %d and the count %d:\n%s", n, maxLoggedNodes, len(flood), line)
	}
}

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
	trap, trapped := countingListener(t, "127.0.0.1")
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
	if nodes := s.current().pools["relay"].bal.Nodes(); len(nodes) != 1 || nodes[0].Addr() != named || nodes[0].State() != balancer.StateDown {
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
