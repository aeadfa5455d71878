package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// BenchmarkHandshake measures whole WebSocket handshakes through the
// gateway (dial, upgrade relayed to the backend, close), one after another,
// with no auth, with the jwt plugin deciding every handshake (a fresh token
// each time, so the cache cannot answer), and with the jwt plugin answered
// by the decision cache (one token). It reports handshakes per second and,
// for the uncached run, the p99 of the plugin calls (the upper bound of the
// histogram bucket that holds it).
//
//	go test -run '^$' -bench BenchmarkHandshake -benchtime 2000x ./gateway
func BenchmarkHandshake(b *testing.B) {
	e := newAuthEnv(b)
	far := time.Now().Add(time.Hour)
	run := func(b *testing.B, path string, header func(i int) http.Header) {
		hs := make([]http.Header, b.N)
		for i := range hs {
			hs[i] = header(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			c, status, err := e.dial(path, hs[i])
			if err != nil {
				b.Fatalf("handshake %d: %v (status %d)", i, err, status)
			}
			c.Close()
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handshakes/s")
	}
	b.Run("none", func(b *testing.B) {
		run(b, "/open/bench", func(int) http.Header { return nil })
	})
	b.Run("jwt_uncached", func(b *testing.B) {
		before := pluginCalls(e.srv)
		nonce := time.Now().UnixNano() // tokens unique across runs too
		run(b, "/jwt/bench", func(i int) http.Header {
			return bearer(token(b, fmt.Sprintf("user-%d-%d", nonce, i), far, jwtSecret))
		})
		b.ReportMetric(pluginP99(e.srv, before)*1e6, "p99-plugin-µs")
	})
	b.Run("jwt_cached", func(b *testing.B) {
		h := bearer(token(b, "cached-user", far, jwtSecret))
		run(b, "/jwt/bench", func(int) http.Header { return h })
	})
}

// pluginCalls snapshots the jwt plugin's latency histogram.
func pluginCalls(s *Server) *dto.Histogram {
	var m dto.Metric
	_ = s.metrics.PluginSeconds.WithLabelValues("jwt").(interface{ Write(*dto.Metric) error }).Write(&m)
	return m.GetHistogram()
}

// pluginP99 is the bucket bound holding the 99th percentile of the calls
// since before.
func pluginP99(s *Server, before *dto.Histogram) float64 {
	after := pluginCalls(s)
	total := after.GetSampleCount() - before.GetSampleCount()
	if total == 0 {
		return 0
	}
	for i, bk := range after.GetBucket() {
		n := bk.GetCumulativeCount() - before.GetBucket()[i].GetCumulativeCount()
		if float64(n) >= 0.99*float64(total) {
			return bk.GetUpperBound()
		}
	}
	return after.GetBucket()[len(after.GetBucket())-1].GetUpperBound()
}
