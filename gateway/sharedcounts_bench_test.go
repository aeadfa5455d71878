package gateway

import (
	"context"
	"fmt"
	"testing"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/redistest"
)

// BenchmarkSharedCountsChurn is BenchmarkHandshakeChurn's churn (connect,
// upgrade, one round trip, close) through a gateway in front of three
// echo nodes, with [pools.shared_counts] off and on (a real redis-server,
// the default 250ms interval, and an idle second gateway sharing the same
// pool so every exchange reads one peer). cpu-ns/op is the process's CPU
// per handshake, client and nodes included: on minus off is what sharing
// adds per handshake at this rate (one more atomic load per candidate node
// on the handshake path, and the exchanges beside it).
//
//	go test -run '^$' -bench SharedCountsChurn -benchmem -count 6 ./gateway
func BenchmarkSharedCountsChurn(b *testing.B) {
	rs := redistest.Start(b)
	nodes := []any{"127.0.0.1:0"}
	for range 3 {
		nodes = append(nodes, newEchoNode(b).addr)
	}
	shared := fmt.Sprintf("  [pools.shared_counts]\n  redis = %q\n", rs.URL())
	for _, c := range []struct{ name, pool string }{{"off", ""}, {"on", shared}} {
		gw := benchGateway(b, withID(threeNodesWith(c.pool), "bench-"+c.name), nodes)
		if c.pool != "" {
			benchGateway(b, withID(threeNodesWith(c.pool), "bench-peer"), nodes)
		}
		b.Run(c.name, func(b *testing.B) { churn(b, gw) })
	}
}

// benchGateway starts a gateway with cfgFmt formatted with args and
// returns its client address.
func benchGateway(b *testing.B, cfgFmt string, args []any) string {
	b.Helper()
	cfg, err := conf.Parse("bench.toml", []byte(fmt.Sprintf(cfgFmt, args...)))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv.Addr().String()
}
