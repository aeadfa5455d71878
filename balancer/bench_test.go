package balancer

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures one Acquire plus Release on an
// uncontended pool. The expected cost is one allocation: the Lease.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, policy := range Policies() {
		for _, size := range []int{2, 16, 100} {
			b.Run(fmt.Sprintf("%s/nodes=%d", policy, size), func(b *testing.B) {
				picker, _ := NewPicker(policy)
				p := NewPool("relay", picker, newNodes(size, 0))
				b.ReportAllocs()
				for b.Loop() {
					l, err := p.Acquire(nil)
					if err != nil {
						b.Fatal(err)
					}
					l.Release()
				}
			})
		}
	}
}

// BenchmarkAcquireReleaseKeyed measures a hash pool's keyed Acquire plus
// Release over distinct keys (the ranking scores every node), against
// least_conn in the same run.
func BenchmarkAcquireReleaseKeyed(b *testing.B) {
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("room-%d", i))
	}
	for _, policy := range []string{PolicyLeastConn, PolicyHash} {
		for _, size := range []int{2, 16, 100} {
			b.Run(fmt.Sprintf("%s/nodes=%d", policy, size), func(b *testing.B) {
				picker, _ := NewPicker(policy)
				p := NewPool("relay", picker, newNodes(size, 0))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					l, err := p.AcquireKey(nil, keys[i%len(keys)])
					if err != nil {
						b.Fatal(err)
					}
					l.Release()
					i++
				}
			})
		}
	}
}

// BenchmarkAcquireReleaseParallel measures Acquire plus Release from all
// Ps at once on shared nodes, where the CAS and the counters contend.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, policy := range Policies() {
		for _, size := range []int{2, 16} {
			b.Run(fmt.Sprintf("%s/nodes=%d", policy, size), func(b *testing.B) {
				picker, _ := NewPicker(policy)
				p := NewPool("relay", picker, newNodes(size, 0))
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l, err := p.Acquire(nil)
						if err != nil {
							b.Error(err)
							return
						}
						l.Release()
					}
				})
			})
		}
	}
}

// BenchmarkAcquireFull measures the refusal path, taken in a burst when
// every node is at its cap.
func BenchmarkAcquireFull(b *testing.B) {
	nodes := newNodes(16, 1)
	for _, n := range nodes {
		hold(b, n, 1)
	}
	p := NewPool("relay", nil, nodes)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Acquire(nil); err == nil {
			b.Fatal("acquire on a full pool succeeded")
		}
	}
}

// BenchmarkAcquireReleaseSlowStart measures least_conn while every node
// ramps, the path that reads the clock once per acquire.
func BenchmarkAcquireReleaseSlowStart(b *testing.B) {
	for _, size := range []int{2, 16} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			nodes := newNodes(size, 0)
			for _, n := range nodes {
				n.SetSlowStart(time.Now(), time.Hour)
			}
			p := NewPool("relay", nil, nodes)
			b.ReportAllocs()
			for b.Loop() {
				l, err := p.Acquire(nil)
				if err != nil {
					b.Fatal(err)
				}
				l.Release()
			}
		})
	}
}
