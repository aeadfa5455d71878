package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/discovery"
	"github.com/wsgate/wsgate/internal/discovery/dnstest"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// sharedPortListeners opens n listeners on 127.0.0.2, 127.0.0.3, ... with
// one port, as the pods behind a headless service's A records are.
func sharedPortListeners(t *testing.T, n int) ([]net.Listener, int) {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for i := 1; i < n; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i+2, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) == n {
			t.Cleanup(func() {
				for _, ln := range lns {
					_ = ln.Close()
				}
			})
			return lns, port
		}
		for _, ln := range lns {
			_ = ln.Close()
		}
	}
	t.Fatal("no port free on every loopback address")
	return nil, 0
}

// helloReplica dials path with ?hello=1 and returns the connection and
// the replica that answered.
func (e *env) helloReplica(path string) (*websocket.Conn, string) {
	e.t.Helper()
	c := e.mustDial(path + "?hello=1")
	var h struct{ Replica string }
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.ReadJSON(&h); err != nil {
		e.t.Fatalf("hello: %v", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, h.Replica
}

// expectClose reads c until it ends and requires close code.
func expectClose(t *testing.T, c *websocket.Conn, code int) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		if !websocket.IsCloseError(err, code) {
			t.Fatalf("read ended with %v, want close %d", err, code)
		}
		return
	}
}

// nodeState is the state of addr in the running pool, or false.
func (s *Server) nodeState(pool, addr string) (balancer.State, bool) {
	n := s.current().pools[pool].Node(addr)
	if n == nil {
		return 0, false
	}
	return n.State(), true
}

// discoveryBase is a gateway with one pool, probed every 50ms, whose
// [pools.discovery] section follows (with a route to it).
const discoveryBase = `
[gateway]
listen = "127.0.0.1:0"
drain_window = "300ms"
drain_timeout = "5s"
[admin]
listen = "127.0.0.1:0"
[[routes]]
pool = "relay"
[[pools]]
name = "relay"
  [pools.health]
  interval = "50ms"
  timeout = "40ms"
`

const dnsDiscoveryCfg = discoveryBase + `
  rise = 2
  [pools.discovery]
  kind = "dns"
  name = "relays.wsgate.test."
  port = %d
  resolver = %q
  interval = "100ms"
`

// TestDiscoveryDNS runs a pool from the A records of a name on a DNS
// server the test controls: a node added to the name is health-checked
// and takes no client until it passes; a node removed from it has its
// clients closed with 1001; a failing server, and then an answer with no
// record, keep the nodes found last.
func TestDiscoveryDNS(t *testing.T) {
	lns, port := sharedPortListeners(t, 2)
	a1, a2 := lns[0].Addr().String(), lns[1].Addr().String()
	mem := bus.NewMemory()
	r1 := relay.New(relay.Options{ID: "relay-1", Bus: mem.Endpoint(), Logger: quietLog()})
	go func() { _ = r1.Serve(lns[0]) }()
	dns := dnstest.Start(t)
	dns.SetA("relays.wsgate.test", "127.0.0.2")

	srv := startGateway(t, fmt.Sprintf(dnsDiscoveryCfg, port, dns.Addr))
	e := &env{t: t, srv: srv, relays: []*relay.Relay{r1}, gw: srv.Addr().String()}
	t.Cleanup(func() {
		for _, r := range e.relays {
			_ = r.Close(context.Background())
		}
		_ = mem.Close()
	})
	up := func(addr string) func() bool {
		return func() bool { st, ok := srv.nodeState("relay", addr); return ok && st == balancer.StateUp }
	}
	waitUntil(t, up(a1))
	var ones []*websocket.Conn
	c, replica := e.helloReplica("/room/d0")
	if replica != "relay-1" {
		t.Fatalf("first client on %q", replica)
	}
	ones = append(ones, c)

	// A node added to the name is probed before it takes clients: this
	// one accepts TCP but answers nothing yet, so it stays down.
	dns.SetA("relays.wsgate.test", "127.0.0.2", "127.0.0.3")
	waitUntil(t, func() bool {
		st, ok := srv.nodeState("relay", a2)
		chk, _ := srv.current().pools["relay"].Health.Status(a2)
		return ok && st == balancer.StateDown && chk.ConsecutiveFailures >= 2
	})
	for i := range 5 {
		c, replica := e.helloReplica(fmt.Sprintf("/room/d%d", i+1))
		if replica != "relay-1" {
			t.Fatalf("client sent to %q before it passed a probe", replica)
		}
		ones = append(ones, c)
	}
	// Once it serves, it passes rise probes and takes the next client
	// (least connections: it has none).
	r2 := relay.New(relay.Options{ID: "relay-2", Bus: mem.Endpoint(), Logger: quietLog()})
	e.relays = append(e.relays, r2)
	go func() { _ = r2.Serve(lns[1]) }()
	waitUntil(t, up(a2))
	two, replica := e.helloReplica("/room/d9")
	if replica != "relay-2" {
		t.Fatalf("client after the new node came up went to %q", replica)
	}

	// A node removed from the name is drained as a reload removing it:
	// its clients get 1001 from the gateway; the others stay.
	dns.SetA("relays.wsgate.test", "127.0.0.3")
	for _, c := range ones {
		expectClose(t, c, 1001)
	}
	waitUntil(t, func() bool { _, ok := srv.nodeState("relay", a1); return !ok })
	for i := range 3 {
		c, replica := e.helloReplica(fmt.Sprintf("/room/after%d", i))
		if replica != "relay-2" {
			t.Fatalf("client sent to %q after its node left the name", replica)
		}
		c.Close()
	}

	// A reload keeps the discovered nodes, their health and tunnels.
	waitUntil(t, func() bool { return srv.Tunnels() == 1 }) // the closed ones ended
	cfg, err := conf.Parse("reload.toml", []byte(fmt.Sprintf(dnsDiscoveryCfg, port, dns.Addr)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if st, ok := srv.nodeState("relay", a2); !ok || st != balancer.StateUp || srv.Tunnels() != 1 || srv.current().n != 2 {
		t.Fatalf("after a reload: node in pool %v, state %v, tunnels %d, generation %d", ok, st, srv.Tunnels(), srv.current().n)
	}

	// A failing DNS server keeps the set, and so does an answer with no
	// record at all.
	lookups := func(result string) float64 {
		return counter(e.scrape(), "wsgate_discovery_lookups_total", "result", result)
	}
	for _, step := range []struct {
		result string
		break_ func()
	}{
		{"error", func() { dns.Fail(true) }},
		{"empty", func() { dns.Fail(false); dns.SetA("relays.wsgate.test") }},
	} {
		before := max(lookups(step.result), 0)
		step.break_()
		waitUntil(t, func() bool { return lookups(step.result) >= before+3 })
		nodes := srv.current().pools["relay"].Balancer.Nodes()
		if len(nodes) != 1 || nodes[0].Addr() != a2 || nodes[0].State() != balancer.StateUp {
			t.Fatalf("after %s lookups the pool has %v", step.result, nodes)
		}
		c, replica := e.helloReplica("/room/kept")
		if replica != "relay-2" {
			t.Fatalf("client went to %q", replica)
		}
		c.Close()
	}
	fams := e.scrape()
	for _, m := range fams["wsgate_discovery_nodes"].GetMetric() {
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Fatalf("wsgate_discovery_nodes %v, want 1 (the last good answer)", v)
		}
	}
	if code, body := e.admin(http.MethodGet, "/api/nodes", ""); code != 200 || !strings.Contains(string(body), `"addr": "`+a2+`"`) || strings.Contains(string(body), a1) {
		t.Fatalf("/api/nodes: %d %s", code, body)
	}
	two.Close()
	e.waitZero()
}

const redisDiscoveryCfg = discoveryBase + `
  rise = 1
  [pools.discovery]
  kind = "redis"
  name = "wsgate:test"
  redis = %q
  interval = "100ms"
`

// TestDiscoveryRedis runs a pool from relay-backend processes that
// register in a real redis-server: both are found and used; one sent
// SIGTERM deregisters, its clients get 1001 and new clients go to the
// other; the last one gone leaves its node in the pool (an empty answer
// keeps the set), and every count returns to zero.
func TestDiscoveryRedis(t *testing.T) {
	rs := redistest.Start(t)
	bin := testproc.Build(t, "./relay-backend")
	start := func(id string) (*testproc.Proc, string) {
		addr := testproc.FreeAddr(t)
		p := testproc.Start(t, id, bin, "-listen", addr, "-id", id, "-drain-window", "300ms",
			"-register-redis", rs.URL(), "-register-prefix", "wsgate:test", "-register-ttl", "1s")
		testproc.WaitHTTP(t, "http://"+addr+"/healthz", 200, 10*time.Second)
		return p, addr
	}
	pa, addrA := start("relay-a")
	pb, addrB := start("relay-b")

	// The default user has no password, so Redis takes any for it: the
	// gateway really connects with this URL, which /api/config hides.
	srv := startGateway(t, fmt.Sprintf(redisDiscoveryCfg, "redis://default:hunter2@"+rs.Addr+"/0"))
	e := &env{t: t, srv: srv, gw: srv.Addr().String()}
	up := func(addr string) func() bool {
		return func() bool { st, ok := srv.nodeState("relay", addr); return ok && st == balancer.StateUp }
	}
	waitUntil(t, up(addrA))
	waitUntil(t, up(addrB))
	var onA, onB []*websocket.Conn
	for i := range 10 {
		c, replica := e.helloReplica(fmt.Sprintf("/room/r%d", i))
		switch replica {
		case "relay-a":
			onA = append(onA, c)
		case "relay-b":
			onB = append(onB, c)
		default:
			t.Fatalf("replica %q", replica)
		}
	}
	if len(onA) == 0 || len(onB) == 0 {
		t.Fatalf("clients on a: %d, on b: %d", len(onA), len(onB))
	}
	if code, body := e.admin(http.MethodGet, "/api/config", ""); code != 200 || strings.Contains(string(body), "hunter2") ||
		!strings.Contains(string(body), `"redis": "redis://default:REDACTED@`) {
		t.Fatalf("/api/config: %d %s", code, body)
	}

	// SIGTERM: relay-a deletes its key, the gateway's next scan drops
	// it, and no new client goes there.
	if err := pa.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { _, ok := srv.nodeState("relay", addrA); return !ok })
	for i := range 10 {
		c, replica := e.helloReplica(fmt.Sprintf("/room/after%d", i))
		if replica != "relay-b" {
			t.Fatalf("new client went to %q after relay-a was sent SIGTERM", replica)
		}
		onB = append(onB, c)
	}
	for _, c := range onA {
		expectClose(t, c, 1001)
	}
	if code, err := pa.Wait(15 * time.Second); code != 0 || err != nil {
		t.Fatalf("relay-a exit %d %v", code, err)
	}
	if !strings.Contains(pa.Output(), "deregistered from discovery") {
		t.Fatalf("relay-a did not say it deregistered:\n%s", pa.Output())
	}

	// The last relay leaves too: the empty answer keeps its node (the
	// pool is never emptied by discovery); health checks take it down.
	emptyBefore := max(counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "empty"), 0)
	if err := pb.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, c := range onB {
		expectClose(t, c, 1001)
	}
	if code, err := pb.Wait(15 * time.Second); code != 0 || err != nil {
		t.Fatalf("relay-b exit %d %v", code, err)
	}
	waitUntil(t, func() bool {
		return counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "empty") >= emptyBefore+3
	})
	if st, ok := srv.nodeState("relay", addrB); !ok || st == balancer.StateUp {
		t.Fatalf("relay-b's node after it exited: in pool %v, state %v", ok, st)
	}
	if _, resp, err := e.dial("/room/none", nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("handshake with no relay up: %v %v", resp, err)
	}
	keys, err := redis.NewClient(&redis.Options{Addr: rs.Addr}).Keys(context.Background(), "wsgate:test:*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys left: %v %v", keys, err)
	}
	e.waitZero()
	if n := srv.Tunnels(); n != 0 {
		t.Fatalf("tunnels %d", n)
	}
}

// TestReloadTurnsDiscoveryOn reloads a pool that lists its node into one
// that finds it by DNS: the node is the same (no tunnel closed, no probe
// to pass again) before and after the first answer; a second node the
// answer names is added and probed.
func TestReloadTurnsDiscoveryOn(t *testing.T) {
	lns, port := sharedPortListeners(t, 2)
	a1, a2 := lns[0].Addr().String(), lns[1].Addr().String()
	mem := bus.NewMemory()
	var relays []*relay.Relay
	for i, ln := range lns {
		r := relay.New(relay.Options{ID: fmt.Sprintf("relay-%d", i+1), Bus: mem.Endpoint(), Logger: quietLog()})
		go func() { _ = r.Serve(ln) }()
		relays = append(relays, r)
	}
	dns := dnstest.Start(t)
	static := strings.Replace(discoveryBase, "[[pools]]", "[[pools]]\nnodes = [{ addr = \""+a1+"\" }]", 1)
	srv := startGateway(t, static)
	e := &env{t: t, srv: srv, relays: relays, gw: srv.Addr().String()}
	t.Cleanup(func() {
		for _, r := range relays {
			_ = r.Close(context.Background())
		}
		_ = mem.Close()
	})
	c, replica := e.helloReplica("/room/on")
	if replica != "relay-1" {
		t.Fatalf("client on %q", replica)
	}
	n1 := srv.current().pools["relay"].Node(a1)
	dns.Fail(true) // no answer yet: the listed node stays
	cfg, err := conf.Parse("on.toml", []byte(fmt.Sprintf(dnsDiscoveryCfg, port, dns.Addr)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		return counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "error") >= 2
	})
	if n := srv.current().pools["relay"].Node(a1); n != n1 || n.State() != balancer.StateUp || srv.Tunnels() != 1 {
		t.Fatalf("before the first answer: node %p (was %p), tunnels %d", n, n1, srv.Tunnels())
	}
	dns.SetA("relays.wsgate.test", "127.0.0.2", "127.0.0.3")
	dns.Fail(false)
	waitUntil(t, func() bool { st, ok := srv.nodeState("relay", a2); return ok && st == balancer.StateUp })
	if n := srv.current().pools["relay"].Node(a1); n != n1 || n.State() != balancer.StateUp || srv.Tunnels() != 1 {
		t.Fatalf("after the first answer: node %p (was %p), tunnels %d", n, n1, srv.Tunnels())
	}
	c.Close()
	e.waitZero()
}

// TestDiscoveryLeavesOutOwnListeners registers, in a real redis-server,
// the gateway's own client and admin listeners next to a real relay (an
// -advertise or a Redis key written by mistake). Taken as nodes, the
// client listener passed its probes through the gateway itself, to the
// relay, and every client placed on it looped through the gateway: ten
// clients held twenty tunnels. They are left out: ten clients, ten
// tunnels, all on the relay.
func TestDiscoveryLeavesOutOwnListeners(t *testing.T) {
	rs := redistest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mem := bus.NewMemory()
	r1 := relay.New(relay.Options{ID: "relay-1", Bus: mem.Endpoint(), Logger: quietLog()})
	go func() { _ = r1.Serve(ln) }()
	t.Cleanup(func() {
		_ = r1.Close(context.Background())
		_ = mem.Close()
	})
	srv := startGateway(t, fmt.Sprintf(redisDiscoveryCfg, rs.URL()))
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	self, admin, relayAddr := srv.Addr().String(), srv.AdminAddr().String(), ln.Addr().String()
	for _, a := range []string{self, admin, relayAddr} {
		if err := c.Set(context.Background(), discovery.Key("wsgate:test", a), "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, srv: srv, gw: self}
	waitUntil(t, func() bool { st, ok := srv.nodeState("relay", relayAddr); return ok && st == balancer.StateUp })
	// Lookups go on; the pool keeps only the relay.
	before := counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "ok")
	waitUntil(t, func() bool { return counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "ok") >= before+3 })
	if nodes := srv.current().pools["relay"].Balancer.Nodes(); len(nodes) != 1 || nodes[0].Addr() != relayAddr {
		t.Fatalf("pool nodes %v, want only %s", nodes, relayAddr)
	}
	for i := range 10 {
		cc, replica := e.helloReplica(fmt.Sprintf("/room/own%d", i))
		if replica != "relay-1" {
			t.Fatalf("client on %q", replica)
		}
		defer cc.Close()
	}
	if n := srv.Tunnels(); n != 10 {
		t.Fatalf("10 clients hold %d tunnels, want 10", n)
	}
	// Only the gateway's own listeners left: as an empty answer, the
	// pool keeps the node it has.
	if err := c.Del(context.Background(), discovery.Key("wsgate:test", relayAddr)).Err(); err != nil {
		t.Fatal(err)
	}
	before = counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "ok")
	waitUntil(t, func() bool { return counter(e.scrape(), "wsgate_discovery_lookups_total", "result", "ok") >= before+3 })
	if nodes := srv.current().pools["relay"].Balancer.Nodes(); len(nodes) != 1 || nodes[0].Addr() != relayAddr {
		t.Fatalf("with only its own listeners found, the pool has %v, want %s", nodes, relayAddr)
	}
}
