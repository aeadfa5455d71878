package sharedcount

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/internal/redistest"
)

// BenchmarkExchange measures one exchange (the one Redis command a sharer
// sends per interval) for a pool of three nodes with one other gateway on
// a real redis-server: ns/op is its latency, cpu-ns/op this process's CPU
// for it and redis-cpu-ns/op redis-server's. A gateway makes 1/interval
// of them a second per pool (4 at the default 250ms), whatever its
// handshake rate.
//
//	go test -run '^$' -bench Exchange -benchmem ./gateway/internal/sharedcount
func BenchmarkExchange(b *testing.B) {
	rs := redistest.Start(b)
	peer := startBenchSharer(b, rs.URL(), "peer", time.Second)
	self := startBenchSharer(b, rs.URL(), "self", time.Hour) // exchanges only when called below
	_ = peer
	self.exchange() // loads the script
	b.ReportAllocs()
	cpu0, rcpu0 := cpuTime(), procCPU(rs.Pid())
	b.ResetTimer()
	for range b.N {
		self.exchange()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(procCPU(rs.Pid())-rcpu0)/float64(b.N), "redis-cpu-ns/op")
	if !self.lastOK.After(time.Now().Add(-time.Minute)) || self.fallback {
		b.Fatal("exchanges failed")
	}
}

func startBenchSharer(b *testing.B, url, id string, interval time.Duration) *Sharer {
	nodes := make([]*balancer.Node, 3)
	for i := range nodes {
		nodes[i] = balancer.NewNode(fmt.Sprintf("127.0.0.1:%d", 7001+i), 1, 0)
	}
	s, err := Start(Config{URL: url, Pool: "relay", ID: id, KeyPrefix: "bench", Interval: interval,
		Nodes: func() []*balancer.Node { return nodes }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Stop(true); <-s.Done() })
	return s
}

// cpuTime is this process's user+system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// procCPU is process pid's utime+stime from /proc in nanoseconds
// (clock ticks of 10ms), 0 if unreadable.
func procCPU(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return (ut + st) * int64(10*time.Millisecond)
}
