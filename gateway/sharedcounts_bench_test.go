package gateway

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// BenchmarkSharedCountsChurn measures handshakes through an in-process
// gateway in front of three in-process relays, with [pools.shared_counts]
// off and on (a real redis-server, the default 250ms interval): each
// operation opens a WebSocket, then closes it with a close handshake.
// cpu-ns/op is the whole process's user+system CPU per handshake (client,
// gateway and relays alike), so on minus off is what sharing adds per
// handshake at this rate: the handshake path reads one more atomic per
// candidate node, and the exchanges run beside it.
//
//	go test -run '^$' -bench SharedCountsChurn -benchtime 3000x -count 3 ./gateway
func BenchmarkSharedCountsChurn(b *testing.B) {
	rs := redistest.Start(b)
	for _, c := range []struct{ name, pool string }{
		{"off", ""},
		{"on", "  [pools.shared_counts]\n  redis = \"" + rs.URL() + "\"\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			gw := benchGateway(b, threeNodesWith(c.pool))
			d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
			url := "ws://" + gw + "/room/bench"
			b.ReportAllocs()
			cpu0 := benchCPU()
			b.ResetTimer()
			for range b.N {
				conn, _, err := d.Dial(url, nil)
				if err != nil {
					b.Fatal(err)
				}
				_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				_, _, _ = conn.ReadMessage() // the close coming back
				conn.Close()
			}
			b.StopTimer()
			b.ReportMetric(float64(benchCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchCPU is this process's user+system CPU time in nanoseconds.
func benchCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchGateway starts three in-process relays on one memory bus and a
// gateway in front of them with cfgFmt (as newEnv formats it), and
// returns the gateway's address.
func benchGateway(b *testing.B, cfgFmt string) string {
	mem := bus.NewMemory()
	args := []any{"127.0.0.1:0"}
	var relays []*relay.Relay
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		r := relay.New(relay.Options{ID: fmt.Sprint("bench-", i), Bus: mem.Endpoint(), Logger: quietLog()})
		go func() { _ = r.Serve(ln) }()
		relays = append(relays, r)
		args = append(args, ln.Addr().String())
	}
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
	b.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		for _, r := range relays {
			_ = r.Close(context.Background())
		}
		_ = mem.Close()
	})
	return srv.Addr().String()
}
