package registry

import (
	"fmt"
	"testing"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// filled returns a registry of n tunnels spread over nodes, made with its
// Counters and never started (a scrape reads, it does not forward), and
// the nodes.
func filled(b *testing.B, n, nodes int) (*Tunnels, []*balancer.Node) {
	b.Helper()
	ns := testNodes(b, nodes)
	r := &Tunnels{}
	for i := range n {
		lease, ok := ns[i%nodes].TryAcquire()
		if !ok {
			b.Fatal("no lease")
		}
		var info *Info
		if i%10 == 0 {
			info = &Info{Subject: fmt.Sprintf("user-%d", i)}
		}
		e := NewEntry(lease, info)
		e.SetTunnel(tunnel.New(tunnel.Params{Lease: e, Engine: tunnel.EngineGoroutines, Counters: r.Counters()}))
		r.Add(e)
	}
	return r, ns
}

// BenchmarkScrape is what a /metrics scrape and an /api/nodes call read
// of the registry: the live count and the totals. Its cost must not grow
// with the number of tunnels.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("tunnels=%d", n), func(b *testing.B) {
			r, _ := filled(b, n, 4)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if r.Len() != n || r.Totals().FramesToNode != 0 {
					b.Fatal("wrong registry")
				}
			}
		})
	}
}

// BenchmarkOldestOfOneNode is a rebalance round's registry read: the
// oldest tunnels of the one node it moves clients off, among n tunnels
// of which that node holds 100. Its cost must not grow with the tunnels
// of the other nodes.
func BenchmarkOldestOfOneNode(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("tunnels=%d", n), func(b *testing.B) {
			r, ns := filled(b, n-100, 4)
			spare := testNodes(b, 5)[4]
			for range 100 {
				lease, _ := spare.TryAcquire()
				e := NewEntry(lease, nil)
				e.SetTunnel(tunnel.New(tunnel.Params{Lease: e, Engine: tunnel.EngineGoroutines}))
				r.Add(e)
			}
			_ = ns
			want := map[*balancer.Node]int{spare: 10}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if len(r.Oldest(want)[spare]) != 36 {
					b.Fatal("wrong oldest")
				}
			}
		})
	}
}
