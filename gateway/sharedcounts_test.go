package gateway

import (
	"context"
	"fmt"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/internal/redistest"
)

// sharedPool is threeNodesWith's pool lines for [pools.shared_counts] on
// url, with gateway.id set by the format's caller.
func sharedPool(url string) string {
	return fmt.Sprintf("  [pools.shared_counts]\n  redis = %q\n  interval = \"50ms\"\n  key_prefix = \"test:counts\"\n", url)
}

// withID puts gateway.id = id into a threeNodesWith config.
func withID(cfg, id string) string {
	return "[gateway]\nid = " + fmt.Sprintf("%q", id) + cfg[len("[gateway]"):]
}

// peer starts a second gateway in front of e's relays with cfgFmt.
func (e *env) peer(cfgFmt string) *env {
	e.t.Helper()
	args := []any{"127.0.0.1:0"}
	for _, a := range e.addrs {
		args = append(args, a)
	}
	cfg, err := conf.Parse("peer.toml", []byte(fmt.Sprintf(cfgFmt, args...)))
	if err != nil {
		e.t.Fatal(err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		e.t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return &env{t: e.t, srv: srv, relays: e.relays, addrs: e.addrs, gw: srv.Addr().String()}
}

// others returns the others count of each node of pool "relay", by address.
func (e *env) others() map[string]int {
	out := map[string]int{}
	for _, n := range e.srv.current().pools["relay"].Balancer.Nodes() {
		out[n.Addr()] = n.Others()
	}
	return out
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSharedCountsTwoGateways checks [pools.shared_counts] with two
// gateways in one process in front of the same three relays and a real
// redis-server: gateway B's nodes count gateway A's tunnels, so B sends a
// new client to the node A holds least; with Redis killed both keep
// serving, B falls back to its own counts (the fallback gauge says so),
// and every count returns to zero once the clients leave.
func TestSharedCountsTwoGateways(t *testing.T) {
	rs := redistest.Start(t)
	a := newEnv(t, 3, withID(threeNodesWith(sharedPool(rs.URL())), "gw-a"))
	b := a.peer(withID(threeNodesWith(sharedPool(rs.URL())), "gw-b"))

	// A holds one tunnel on two of the three nodes (least_conn spreads
	// them): the third is where B must send its next client.
	var conns []*websocket.Conn
	for range 2 {
		c, _ := a.dialLands("/room/shared", nil)
		conns = append(conns, c)
	}
	free := ""
	for addr, n := range a.lives() {
		if n == 0 {
			free = addr
		}
	}
	waitUntil(t, func() bool { return sameCounts(b.others(), a.lives()) })
	if got := b.others()[free]; got != 0 {
		t.Fatalf("B counts %d of A's tunnels on %s, want 0", got, free)
	}
	bc, landed := b.dialLands("/room/shared", nil)
	if landed != free {
		t.Fatalf("B's client landed on %s, want %s (A holds none there): B others %v", landed, free, b.others())
	}
	conns = append(conns, bc)
	waitUntil(t, func() bool { return a.others()[free] == 1 })

	// Redis gone: handshakes go on; B's others age out to 0.
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		return sameCounts(b.others(), map[string]int{a.addrs[0]: 0, a.addrs[1]: 0, a.addrs[2]: 0})
	})
	waitUntil(t, func() bool {
		return b.srv.gathered(t, "wsgate_shared_counts_fallback", "pool", "relay") == 1
	})
	if n := b.srv.gathered(t, "wsgate_shared_counts_exchanges_total", "result", "error"); n < 1 {
		t.Fatalf("exchanges_total{result=error} = %v, want >= 1", n)
	}
	for _, g := range []*env{a, b} {
		c := g.mustDial("/room/shared")
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	a.waitZero()
	b.waitZero()
}

// gathered reads the value of the gauge or counter series of metric name
// with label set to value in s's registry; -1 without one. (A gateway of
// these tests has no admin listener to scrape.)
func (s *Server) gathered(t *testing.T, name, label, value string) float64 {
	t.Helper()
	fams, err := s.metrics.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if g := m.GetGauge(); g != nil {
						return g.GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestSharedCountsReloadOff checks that a reload which drops
// [pools.shared_counts] stops the pool's sharing: its nodes count this
// gateway's tunnels only again, and the other gateway stops counting its
// tunnels once its key is deleted.
func TestSharedCountsReloadOff(t *testing.T) {
	rs := redistest.Start(t)
	a := newEnv(t, 3, withID(threeNodesWith(sharedPool(rs.URL())), "gw-a"))
	b := a.peer(withID(threeNodesWith(sharedPool(rs.URL())), "gw-b"))
	ca, _ := a.dialLands("/room/r", nil)
	cb, _ := b.dialLands("/room/r", nil)
	total := func(m map[string]int) (n int) {
		for _, v := range m {
			n += v
		}
		return n
	}
	waitUntil(t, func() bool { return total(b.others()) == 1 && total(a.others()) == 1 })
	args := []any{"127.0.0.1:0", a.addrs[0], a.addrs[1], a.addrs[2]}
	cfg, err := conf.Parse("off.toml", []byte(fmt.Sprintf(withID(threeNodesWith(""), "gw-b"), args...)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return total(b.others()) == 0 && total(a.others()) == 0 })
	ca.Close()
	cb.Close()
	a.waitZero()
	b.waitZero()
}

// TestSharedCountsRedisRedacted checks that GET /api/config's view of the
// config hides the password in pools.shared_counts.redis, and leaves the
// loaded config as it was.
func TestSharedCountsRedisRedacted(t *testing.T) {
	cfg, err := conf.Parse("r.toml", []byte(fmt.Sprintf(threeNodesWith(sharedPool("redis://:hunter2@127.0.0.1:6379/0")),
		"127.0.0.1:0", "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")))
	if err != nil {
		t.Fatal(err)
	}
	out := admin.RedactedConfig(cfg)
	if got := out.Pools[0].SharedCounts.Redis; got != "redis://:REDACTED@127.0.0.1:6379/0" {
		t.Fatalf("shown as %q", got)
	}
	if got := cfg.Pools[0].SharedCounts.Redis; got != "redis://:hunter2@127.0.0.1:6379/0" {
		t.Fatalf("loaded config changed to %q", got)
	}
}
