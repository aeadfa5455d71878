package registry

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// testNodes returns k nodes of one pool, each with room for many leases.
func testNodes(t testing.TB, k int) []*balancer.Node {
	t.Helper()
	var reg balancer.Registry
	nodes := make([]*balancer.Node, k)
	for i := range nodes {
		nodes[i], _ = reg.Node("pool", fmt.Sprintf("127.0.0.1:%d", 1000+i), 1, 0)
	}
	return nodes
}

// idleTunnel is a tunnel over loopback whose peers never send: the
// registry keeps it, returns it, and may tell it to go away.
func idleTunnel(t testing.TB, e *Entry) *tunnel.Tunnel {
	client, _ := loopPair(t)
	node, _ := loopPair(t)
	tun := tunnel.New(tunnel.Params{Client: client, Node: node, Lease: e})
	e.SetTunnel(tun)
	tun.Start()
	t.Cleanup(tun.Abort)
	return tun
}

// addEntry registers a tunnel to n with the credential subject and key.
func addEntry(t testing.TB, r *Tunnels, n *balancer.Node, subject, key string) *Entry {
	t.Helper()
	var info *Info
	if subject != "" || key != "" {
		info = &Info{Subject: subject, Key: key}
	}
	lease, ok := n.TryAcquire()
	if !ok {
		t.Fatal("no lease")
	}
	e := NewEntry(lease, info)
	idleTunnel(t, e)
	r.Add(e)
	return e
}

func TestIndexesFollowAddAndRemove(t *testing.T) {
	nodes := testNodes(t, 3)
	var r Tunnels
	var es []*Entry
	for i := range 9 {
		subj := []string{"alice", "bob", ""}[i%3]
		key := []string{"k1", "", "k2"}[i%3]
		es = append(es, addEntry(t, &r, nodes[i%3], subj, key))
	}
	// Remove from the head, the middle and the tail of the lists.
	for _, i := range []int{8, 4, 0} {
		if !r.Remove(es[i]) {
			t.Fatalf("entry %d was not live", i)
		}
		if r.Remove(es[i]) {
			t.Fatalf("entry %d removed twice", i)
		}
	}
	live := func(idx ...int) []*tunnel.Tunnel {
		var ts []*tunnel.Tunnel
		for _, i := range idx {
			ts = append(ts, es[i].Tunnel())
		}
		return ts
	}
	if got := r.Len(); got != 6 {
		t.Fatalf("Len %d, want 6", got)
	}
	tests := []struct {
		name string
		got  []*tunnel.Tunnel
		want []*tunnel.Tunnel
	}{
		{"all, newest first", r.Snapshot(nil), live(7, 6, 5, 3, 2, 1)},
		{"node 0", r.Snapshot(nodes[0]), live(6, 3)},
		{"node 1", r.Snapshot(nodes[1]), live(7, 1)},
		{"node 2", r.Snapshot(nodes[2]), live(5, 2)},
		{"oldest of node 1", r.Oldest(map[*balancer.Node]int{nodes[1]: 1, nodes[0]: 0})[nodes[1]], live(1, 7)},
	}
	for _, tc := range tests {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if len(r.Oldest(map[*balancer.Node]int{nodes[0]: 0})) != 0 {
		t.Error("Oldest returned a node that wants none")
	}
	for i, e := range es {
		removed := i == 8 || i == 4 || i == 0
		if r.Alive(e.Tunnel()) == removed {
			t.Errorf("entry %d: Alive %v", i, !removed)
		}
		if r.Holds(e.Tunnel(), nodes[i%3]) == removed || r.Holds(e.Tunnel(), nodes[(i+1)%3]) {
			t.Errorf("entry %d: Holds wrong", i)
		}
	}
	for _, e := range es {
		r.Remove(e)
	}
	if r.Len() != 0 || len(r.byNode) != 0 || len(r.bySubj) != 0 || len(r.byKey) != 0 {
		t.Fatalf("left after every tunnel ended: %d live, %d nodes, %d subjects, %d keys",
			r.Len(), len(r.byNode), len(r.bySubj), len(r.byKey))
	}
}

func TestRevokeTellsOnlyTheNamedTunnels(t *testing.T) {
	nodes := testNodes(t, 2)
	tests := []struct {
		name         string
		subject, key string
		want         int
	}{
		{"subject", "alice", "", 3},
		{"key", "", "k1", 2},
		{"key of another subject", "", "k3", 1},
		{"subject and its own key, counted once", "alice", "k1", 3},
		{"subject and another's key", "alice", "k3", 4},
		{"unknown", "carol", "k9", 0},
		{"empty matches nothing", "", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Tunnels
			addEntry(t, &r, nodes[0], "alice", "k1")
			addEntry(t, &r, nodes[1], "alice", "k1")
			addEntry(t, &r, nodes[0], "alice", "k2")
			addEntry(t, &r, nodes[1], "bob", "k3")
			addEntry(t, &r, nodes[0], "", "")
			if got := r.Revoke(tc.subject, tc.key); got != tc.want {
				t.Fatalf("Revoke(%q, %q) = %d, want %d", tc.subject, tc.key, got, tc.want)
			}
		})
	}
}

func TestPruneRetiredKeepsBusyNodes(t *testing.T) {
	nodes := testNodes(t, 3)
	var r Tunnels
	e := addEntry(t, &r, nodes[0], "", "")
	for _, n := range nodes {
		r.Retire(n)
	}
	r.PruneRetired(func(n *balancer.Node) bool { return n == nodes[1] })
	if !r.Leaving(nodes[0]) || !r.Leaving(nodes[1]) || r.Leaving(nodes[2]) || r.RetiredLen() != 2 {
		t.Fatalf("after prune: leaving %v %v %v, %d retired; want busy and kept nodes only",
			r.Leaving(nodes[0]), r.Leaving(nodes[1]), r.Leaving(nodes[2]), r.RetiredLen())
	}
	r.Remove(e)
	r.PruneRetired(func(*balancer.Node) bool { return false })
	if r.RetiredLen() != 0 {
		t.Fatalf("%d retired after the last tunnel ended", r.RetiredLen())
	}
	if n := r.Wait(context.Background()); n != 0 {
		t.Fatalf("Wait: %d left", n)
	}
}
