package balancer

import (
	"fmt"
	"testing"
)

// newNodes returns n up nodes with weight 1 and the given cap.
func newNodes(n, maxConns int) []*Node {
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = NewNode(fmt.Sprintf("127.0.0.1:%d", 7001+i), 1, maxConns)
	}
	return nodes
}

// hold takes k leases on n directly and returns them.
func hold(t testing.TB, n *Node, k int) []*Lease {
	t.Helper()
	ls := make([]*Lease, 0, k)
	for range k {
		l, ok := n.TryAcquire()
		if !ok {
			t.Fatalf("hold: node %s full at live %d", n.Addr(), n.Live())
		}
		ls = append(ls, l)
	}
	return ls
}

func releaseAll(ls []*Lease) {
	for _, l := range ls {
		l.Release()
	}
}

// assertAllZero fails unless every node's live count is zero.
func assertAllZero(t testing.TB, nodes []*Node) {
	t.Helper()
	for _, n := range nodes {
		if n.Live() != 0 {
			t.Errorf("node %s live %d, want 0", n.Addr(), n.Live())
		}
	}
}
