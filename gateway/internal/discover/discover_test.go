package discover

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/discovery"
)

// fakeGateway is a Gateway whose running config is cfg: ApplyDiscovered
// fills it in as the gateway's swap does.
type fakeGateway struct {
	set       *Set
	cfg       *conf.Config
	listening []netip.AddrPort
	draining  bool
	swaps     int
}

func (g *fakeGateway) ApplyDiscovered(take func([]netip.AddrPort) bool) error {
	if g.draining || !take(g.listening) {
		return nil
	}
	g.swaps++
	g.cfg = g.set.Fill(g.cfg, g.cfg)
	return nil
}

// noPrivate is a node policy that refuses the addresses in 10.0.0.0/8.
func noPrivate(_ conf.Discovery, nodes []conf.Node) []conf.Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n conf.Node) bool { return strings.HasPrefix(n.Addr, "10.") })
}

// newFake returns a Set in front of a fakeGateway running a config with
// pool "relay" (discovery, listing listed) and pool "static".
func newFake(listed ...string) (*Set, *fakeGateway) {
	g := &fakeGateway{listening: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")}}
	relay := conf.Pool{Name: "relay", MaxConnsPerNode: 7, Discovery: conf.Discovery{Kind: "dns", Name: "relays.test"}}
	for _, a := range listed {
		relay.Nodes = append(relay.Nodes, conf.Node{Addr: a, Weight: 1})
	}
	g.cfg = &conf.Config{Pools: []conf.Pool{relay, {Name: "static", Nodes: []conf.Node{{Addr: "127.0.0.1:9000"}}}}}
	g.set = New(Options{Gateway: g, Log: slog.New(slog.DiscardHandler), Keep: noPrivate,
		Screen: func(_ conf.Discovery, src discovery.Source, _ *slog.Logger) discovery.Source { return src }})
	return g.set, g
}

func addrs(cfg *conf.Config, pool string) []string {
	nodes, _ := poolNodes(cfg, pool)
	var out []string
	for _, n := range nodes {
		out = append(out, n.Addr)
	}
	return out
}

// TestFill checks that a pool with discovery keeps the nodes it has
// until something is found, held to its node policy, that a config
// without discovery comes back as it is, and that a pool without
// discovery keeps its own nodes.
func TestFill(t *testing.T) {
	s, g := newFake("127.0.0.2:7000", "10.0.0.1:7000")
	plain := &conf.Config{Pools: []conf.Pool{{Name: "static"}}}
	if got := s.Fill(plain, g.cfg); got != plain {
		t.Fatalf("a config without discovery was copied")
	}
	got := s.Fill(g.cfg, g.cfg)
	if a := addrs(got, "relay"); !slices.Equal(a, []string{"127.0.0.2:7000"}) {
		t.Fatalf("before the first answer relay has %v, want the listed node the policy takes", a)
	}
	if n, _ := poolNodes(got, "relay"); n[0].MaxConns != 7 {
		t.Fatalf("max_conns %d, want the pool's max_conns_per_node", n[0].MaxConns)
	}
	if a := addrs(got, "static"); !slices.Equal(a, []string{"127.0.0.1:9000"}) {
		t.Fatalf("static has %v", a)
	}
	if a := addrs(g.cfg, "relay"); len(a) != 2 {
		t.Fatalf("Fill changed the config it was given: %v", a)
	}
}

// TestDiscoveredLeavesOutOwn checks a found set through a fake gateway:
// the gateway's own listeners are left out, a set of only those changes
// nothing, a set from a watcher that is no longer the pool's is dropped,
// and nothing is applied while the gateway shuts down.
func TestDiscoveredLeavesOutOwn(t *testing.T) {
	s, g := newFake()
	wt := &watch{}
	s.running = map[string]*watch{"relay": wt}
	s.found = map[string][]conf.Node{}
	log := slog.New(slog.DiscardHandler)
	found := func(w *watch, as ...string) {
		t.Helper()
		var nodes []discovery.Node
		for _, a := range as {
			nodes = append(nodes, discovery.Node{Addr: a, Weight: 1})
		}
		if err := s.discovered("relay", w, nodes, log); err != nil {
			t.Fatal(err)
		}
	}
	found(wt, "127.0.0.1:8080", "127.0.0.2:7000")
	if a := addrs(g.cfg, "relay"); !slices.Equal(a, []string{"127.0.0.2:7000"}) || g.swaps != 1 {
		t.Fatalf("relay has %v after %d swaps, want only the node that is not the gateway", a, g.swaps)
	}
	found(wt, "127.0.0.1:8080")
	found(&watch{}, "127.0.0.3:7000")
	g.draining = true
	found(wt, "127.0.0.4:7000")
	if a := addrs(g.cfg, "relay"); !slices.Equal(a, []string{"127.0.0.2:7000"}) || g.swaps != 1 {
		t.Fatalf("relay has %v after %d swaps, want what the first set gave", a, g.swaps)
	}
}
