package balancer

import "testing"

// TestRegistryKeepsNodeWhileLeased pins a cap overshoot: an address
// dropped from a pool while leases on it were held and then named again
// must be the same node, with its live count against its cap, until its
// last lease ends; only then may it be forgotten.
func TestRegistryKeepsNodeWhileLeased(t *testing.T) {
	none := func(*Node) bool { return false }
	r := NewRegistry()
	n, fresh := r.Node("relay", "127.0.0.1:7001", 1, 2)
	if !fresh {
		t.Fatal("first Node call did not make a node")
	}
	held := hold(t, n, 2)
	// The config drops the address: no pool claims the node.
	if d := r.Forget(none); d != 0 || r.Len() != 1 {
		t.Fatalf("Forget with 2 leases held dropped %d, left %d", d, r.Len())
	}
	// The config names it again, even with other settings.
	again, fresh := r.Node("relay", "127.0.0.1:7001", 5, 9)
	if again != n || fresh {
		t.Fatalf("address named again while leased: fresh node %v", fresh)
	}
	if again.Live() != 2 || again.MaxConns() != 2 {
		t.Fatalf("node named again: live %d cap %d, want 2 and 2 (settings are the caller's to apply)", again.Live(), again.MaxConns())
	}
	if l, ok := again.TryAcquire(); ok {
		l.Release()
		t.Fatal("acquired over the cap of a node named again")
	}
	// The same address in another pool is its own node.
	if o, fresh := r.Node("other", "127.0.0.1:7001", 1, 2); !fresh || o == n || o.Live() != 0 {
		t.Fatalf("same address in another pool: fresh %v, shared %v, live %d", fresh, o == n, o.Live())
	}
	// A node a pool still claims stays even when idle.
	releaseAll(held)
	if n.Live() != 0 {
		t.Fatalf("live %d after every lease was released", n.Live())
	}
	if d := r.Forget(func(x *Node) bool { return x == n }); d != 1 || r.Len() != 1 {
		t.Fatalf("Forget keeping n dropped %d, left %d; want 1 and 1", d, r.Len())
	}
	if d := r.Forget(none); d != 1 || r.Len() != 0 {
		t.Fatalf("Forget of the idle, unclaimed node dropped %d, left %d", d, r.Len())
	}
	if m, fresh := r.Node("relay", "127.0.0.1:7001", 1, 2); !fresh || m == n || m.Live() != 0 {
		t.Fatalf("address named after it was forgotten: fresh %v, live %d", fresh, m.Live())
	}
}
