package balancer

import "testing"

// TestLeastConnCountsOthers checks that least_conn compares live + others
// per unit of weight: the other gateways' tunnels on a node count as if
// they were this gateway's, and the cap stays on the local leases.
func TestLeastConnCountsOthers(t *testing.T) {
	type spec struct{ live, others, weight int }
	tests := []struct {
		name  string
		nodes []spec
		want  int // index of the only acceptable pick
	}{
		{"others only", []spec{{0, 200, 1}, {0, 100, 1}, {0, 150, 1}}, 1},
		{"others outweigh local", []spec{{0, 300, 1}, {100, 100, 1}}, 1},                 // 300 > 200
		{"restarted node refills", []spec{{100, 0, 1}, {100, 200, 1}, {100, 200, 1}}, 0}, // the deficit is in the others
		{"local decides when others equal", []spec{{5, 50, 1}, {4, 50, 1}}, 1},
		{"weighted", []spec{{10, 290, 2}, {0, 200, 1}}, 0}, // 150 < 200
		{"negative clamps to zero", []spec{{3, -7, 1}, {2, 2, 1}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := make([]*Node, len(tt.nodes))
			for i, s := range tt.nodes {
				nodes[i] = NewNode("n", s.weight, 0)
				nodes[i].live.Store(int64(s.live))
				nodes[i].SetOthers(s.others)
			}
			var lc LeastConn
			for range 50 {
				if got := lc.Pick(nodes); got != nodes[tt.want] {
					t.Fatalf("picked live=%d others=%d, want index %d", got.Live(), got.Others(), tt.want)
				}
			}
		})
	}
}

// TestP2CCountsOthers checks that p2c's comparison of its two draws adds
// the other gateways' counts.
func TestP2CCountsOthers(t *testing.T) {
	nodes := weightedNodes(1, 1)
	held := hold(t, nodes[1], 5)
	defer releaseAll(held)
	nodes[0].SetOthers(10) // 10 > 5: node 1 is the less loaded
	pk := seededP2C(7)
	for i := range 50 {
		if got := pk.Pick(nodes); got != nodes[1] {
			t.Fatalf("pick %d = %s, want %s", i, got.Addr(), nodes[1].Addr())
		}
	}
}

// TestOthersLeaveCapLocal checks that the other gateways' count never
// fills this gateway's cap: max_conns bounds its own leases only.
func TestOthersLeaveCapLocal(t *testing.T) {
	n := NewNode("n", 1, 2)
	n.SetOthers(1000)
	held := hold(t, n, 2)
	if _, ok := n.TryAcquire(); ok {
		t.Fatal("third lease acquired over a cap of 2")
	}
	releaseAll(held)
	if n.Live() != 0 || n.Others() != 1000 {
		t.Fatalf("live %d others %d, want 0 and 1000", n.Live(), n.Others())
	}
	n.SetOthers(-1)
	if n.Others() != 0 {
		t.Fatalf("SetOthers(-1) left %d, want 0", n.Others())
	}
}
