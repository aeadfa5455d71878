package roomlog_test

import (
	"context"
	"testing"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// BenchmarkAppend measures one committed message: the Lua script round trip
// on a real redis-server (serial, so latency bound), or the in-process log.
func BenchmarkAppend(b *testing.B) {
	data := make([]byte, 64)
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		l, err := roomlog.NewRedis(context.Background(), roomlog.RedisOptions{URL: srv.URL()})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Append(context.Background(), "bench", data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory", func(b *testing.B) {
		l := roomlog.NewMemory(bus.NewMemory().Endpoint(), roomlog.MemoryOptions{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Append(context.Background(), "bench", data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
