package roomlog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

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
	// The same on a master with one replica, without and with WAIT 1 after
	// each commit (RedisOptions.WaitReplicas): what the wait for the
	// replica's acknowledgement adds per message.
	for _, wait := range []int{0, 1} {
		b.Run(fmt.Sprintf("replicated/wait=%d", wait), func(b *testing.B) {
			master, _ := startReplicated(b)
			l, err := roomlog.NewRedis(context.Background(), roomlog.RedisOptions{URL: master.URL(), WaitReplicas: wait})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ReportAllocs()
			var took []time.Duration
			short := 0 // WAIT timed out (a busy machine): counted, not fatal
			for b.Loop() {
				start := time.Now()
				_, err := l.Append(context.Background(), "bench", data)
				if errors.Is(err, roomlog.ErrNotReplicated) {
					short++
				} else if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.ReportMetric(float64(short), "not-replicated")
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
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
