package balancer

import (
	"errors"
	"strings"
	"testing"
)

func TestNewPicker(t *testing.T) {
	tests := []struct {
		policy  string
		want    string // type name, or "" for an error
		wantErr bool
	}{
		{"least_conn", "*balancer.LeastConn", false},
		{"round_robin", "*balancer.RoundRobin", false},
		{"p2c", "*balancer.P2C", false},
		{"hash", "*balancer.Hash", false},
		{"", "", true},
		{"LEAST_CONN", "", true},
		{"ip_hash", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			p, err := NewPicker(tt.policy)
			if tt.wantErr {
				if err == nil || !errors.Is(err, ErrUnknownPolicy) {
					t.Fatalf("NewPicker(%q) err = %v, want ErrUnknownPolicy", tt.policy, err)
				}
				for _, s := range append(Policies(), `"`+tt.policy+`"`) {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %s", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPicker(%q): %v", tt.policy, err)
			}
			if got := typeName(p); got != tt.want {
				t.Fatalf("NewPicker(%q) = %s, want %s", tt.policy, got, tt.want)
			}
		})
	}
}

func typeName(p Picker) string {
	switch p.(type) {
	case *LeastConn:
		return "*balancer.LeastConn"
	case *RoundRobin:
		return "*balancer.RoundRobin"
	case *P2C:
		return "*balancer.P2C"
	case *Hash:
		return "*balancer.Hash"
	}
	return "other"
}

// FuzzNewPicker checks that every policy name yields either a working picker
// or an ErrUnknownPolicy error that quotes the name.
func FuzzNewPicker(f *testing.F) {
	for _, s := range []string{"least_conn", "round_robin", "", "p2c", "hash", "least_conn ", "\x00", "round_robin\n"} {
		f.Add(s)
	}
	nodes := newNodes(3, 0)
	f.Fuzz(func(t *testing.T, policy string) {
		p, err := NewPicker(policy)
		if err != nil {
			if p != nil || !errors.Is(err, ErrUnknownPolicy) {
				t.Fatalf("NewPicker(%q) = %v, %v", policy, p, err)
			}
			return
		}
		if n := p.Pick(nodes); n == nil {
			t.Fatalf("picker for %q picked nil from 3 nodes", policy)
		}
		if n := p.Pick(nil); n != nil {
			t.Fatalf("picker for %q picked %v from no nodes", policy, n)
		}
	})
}

func TestLeastConnPicksLeastLoaded(t *testing.T) {
	type spec struct{ live, weight int }
	tests := []struct {
		name  string
		nodes []spec
		want  int // index of the only acceptable pick
	}{
		{"single", []spec{{5, 1}}, 0},
		{"fewest live", []spec{{3, 1}, {1, 1}, {2, 1}}, 1},
		{"last is least", []spec{{3, 1}, {2, 1}, {0, 1}}, 2},
		{"weight halves the load", []spec{{3, 2}, {2, 1}}, 0},                      // 1.5 < 2
		{"weight not enough", []spec{{5, 2}, {2, 1}}, 1},                           // 2.5 > 2
		{"large weights exact", []spec{{1 << 40, 1 << 40}, {1 << 39, 1 << 40}}, 1}, // 2^80 vs 2^79 both wrap to 0 in 64 bits
		{"large live", []spec{{1 << 40, 3}, {1<<40 - 1, 3}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := make([]*Node, len(tt.nodes))
			for i, s := range tt.nodes {
				nodes[i] = NewNode("n", s.weight, 0)
				nodes[i].live.Store(int64(s.live))
			}
			var lc LeastConn
			for range 50 {
				if got := lc.Pick(nodes); got != nodes[tt.want] {
					t.Fatalf("picked live=%d weight=%d, want index %d", got.Live(), got.Weight(), tt.want)
				}
			}
		})
	}
}

func TestLeastConnTiesRandom(t *testing.T) {
	tests := []struct {
		name  string
		nodes int
	}{
		{"two tied", 2},
		{"four tied", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := newNodes(tt.nodes, 0)
			var lc LeastConn
			seen := map[*Node]bool{}
			// Missing a node after 1000 uniform picks has probability
			// below 4*(3/4)^1000, i.e. never.
			for i := 0; i < 1000 && len(seen) < tt.nodes; i++ {
				seen[lc.Pick(nodes)] = true
			}
			if len(seen) != tt.nodes {
				t.Fatalf("tied picks reached %d of %d nodes", len(seen), tt.nodes)
			}
		})
	}
}

func TestLeastConnHeldAcquiresSplit(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		total   int
		want    []int
	}{
		{"equal nodes split exactly", []int{1, 1}, 200, []int{100, 100}},
		{"weight 2 takes twice the share", []int{2, 1}, 300, []int{200, 100}},
		{"three weights", []int{1, 2, 3}, 600, []int{100, 200, 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := make([]*Node, len(tt.weights))
			for i, w := range tt.weights {
				nodes[i] = NewNode("n", w, 0)
			}
			p := NewPool("relay", &LeastConn{}, nodes)
			var held []*Lease
			for range tt.total {
				l, err := p.Acquire(nil)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			for i, n := range nodes {
				if n.Live() != tt.want[i] {
					t.Errorf("node %d (weight %d) holds %d, want %d", i, n.Weight(), n.Live(), tt.want[i])
				}
			}
			releaseAll(held)
			assertAllZero(t, nodes)
		})
	}
}

func TestRoundRobinRotates(t *testing.T) {
	nodes := newNodes(3, 0)
	var rr RoundRobin
	for i := range 9 {
		if got := rr.Pick(nodes); got != nodes[i%3] {
			t.Fatalf("pick %d = %s, want %s", i, got.Addr(), nodes[i%3].Addr())
		}
	}
	if rr.Pick(nil) != nil {
		t.Fatal("pick from no candidates is not nil")
	}
}
