package balancer

import (
	"slices"
	"testing"
	"time"
)

// up is an eligible node of weight 1 with live tunnels and no cap.
func up(live int) NodeLoad { return NodeLoad{Live: live, Weight: 1, Eligible: true} }

func TestPlanRebalance(t *testing.T) {
	down := func(live int) NodeLoad { return NodeLoad{Live: live, Weight: 1} }
	weighted := func(live, w int) NodeLoad { return NodeLoad{Live: live, Weight: w, Eligible: true} }
	capped := func(live, c int) NodeLoad { return NodeLoad{Live: live, Weight: 1, MaxConns: c, Eligible: true} }
	tests := []struct {
		name  string
		loads []NodeLoad
		tol   float64
		want  []int
	}{
		{"a third node joins", []NodeLoad{up(3000), up(3000), up(0)}, 0.05, []int{1000, 1000, 0}},
		{"odd total: down to the share rounded up", []NodeLoad{up(151), up(150), up(0)}, 0.05, []int{50, 49, 0}},
		{"within tolerance", []NodeLoad{up(105), up(100), up(95)}, 0.05, []int{0, 0, 0}},
		{"just over tolerance", []NodeLoad{up(106), up(100), up(94)}, 0.05, []int{6, 0, 0}},
		{"over the share but within tolerance gives nothing", []NodeLoad{up(104), up(120), up(76)}, 0.05, []int{0, 20, 0}},
		{"one eligible node", []NodeLoad{up(100), down(0)}, 0.05, []int{0, 0}},
		{"empty pool", []NodeLoad{up(0), up(0)}, 0.05, []int{0, 0}},
		{"no nodes", nil, 0.05, []int{}},
		{"a down node neither counts nor gives", []NodeLoad{up(200), up(0), down(500)}, 0.05, []int{100, 0, 0}},
		{"a down node takes nothing", []NodeLoad{up(200), up(200), down(0)}, 0.05, []int{0, 0, 0}},
		{"weights: 2:1 is balanced", []NodeLoad{weighted(200, 2), weighted(100, 1)}, 0.05, []int{0, 0}},
		{"weights: the heavy node is the empty one", []NodeLoad{weighted(300, 1), weighted(0, 2)}, 0.05, []int{200, 0}},
		{"a cap leaves no room: nothing moves", []NodeLoad{up(300), capped(100, 100)}, 0.05, []int{0, 0}},
		{"a cap limits the moves", []NodeLoad{up(300), capped(0, 50)}, 0.05, []int{50, 0}},
		{"too little room: the most loaded gives first", []NodeLoad{up(400), up(250), capped(0, 60), up(350)}, 0.1, []int{55, 0, 0, 5}},
		{"a cap above the share does not matter", []NodeLoad{up(300), capped(0, 1000)}, 0.05, []int{150, 0}},
		{"tiny pool settles", []NodeLoad{up(3), up(2), up(2)}, 0.1, []int{0, 0, 0}},
		{"tiny pool moves one", []NodeLoad{up(4), up(2), up(1)}, 0.1, []int{1, 0, 0}},
		{"large tolerance holds still", []NodeLoad{up(140), up(100), up(60)}, 0.5, []int{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanRebalance(tt.loads, tt.tol)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("PlanRebalance = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPlanRebalanceNeverBelowShare checks over many pools that a plan
// never takes a giver below its share, never moves more than the nodes
// under their share can take, and leaves every eligible node within
// tolerance once the tunnels land where there is room.
func TestPlanRebalanceNeverBelowShare(t *testing.T) {
	for a := 0; a <= 300; a += 7 {
		for b := 0; b <= 300; b += 11 {
			for c := 0; c <= 60; c += 13 {
				loads := []NodeLoad{up(a), up(b), up(c)}
				moves := PlanRebalance(loads, 0.05)
				room := 0
				for i := range loads {
					share := Share(loads, i)
					if moves[i] > 0 && loads[i].Live-moves[i] < share {
						t.Fatalf("%v: node %d moved %d, below its share %d", loads, i, moves[i], share)
					}
					room += max(share-loads[i].Live, 0)
				}
				if sum := moves[0] + moves[1] + moves[2]; sum > room {
					t.Fatalf("%v: moves %v, room only %d", loads, moves, room)
				}
			}
		}
	}
}

func TestShare(t *testing.T) {
	loads := []NodeLoad{{Live: 10, Weight: 1, Eligible: true}, {Live: 0, Weight: 2, Eligible: true}, {Live: 99, Weight: 1}}
	for i, want := range []int{4, 7, 0} {
		if got := Share(loads, i); got != want {
			t.Errorf("Share(%d) = %d, want %d", i, got, want)
		}
	}
}

func TestLoadOf(t *testing.T) {
	n := NewNode("127.0.0.1:7001", 3, 50)
	ls := hold(t, n, 2)
	defer releaseAll(ls)
	got := LoadOf(n, time.Now())
	want := NodeLoad{Live: 2, Weight: 3 * WeightScale, MaxConns: 50, Eligible: true}
	if got != want {
		t.Fatalf("LoadOf = %+v, want %+v", got, want)
	}
	n.SetState(StateDraining)
	if LoadOf(n, time.Now()).Eligible {
		t.Fatal("a draining node is eligible")
	}
}

func TestCanTake(t *testing.T) {
	tests := []struct {
		name  string
		loads []NodeLoad
		want  bool
	}{
		{"an emptier node", []NodeLoad{up(10), up(5)}, true},
		{"equal after the move is no better", []NodeLoad{up(10), up(9)}, false},
		{"the only other node is down", []NodeLoad{up(10), {Live: 0, Weight: 1}}, false},
		{"the only other node is at its cap", []NodeLoad{up(10), {Live: 3, Weight: 1, MaxConns: 3, Eligible: true}}, false},
		{"a heavier node with more tunnels", []NodeLoad{up(10), {Live: 15, Weight: 2, Eligible: true}}, true},
		{"an empty giver", []NodeLoad{up(0), up(0)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanTake(tt.loads, 0); got != tt.want {
				t.Fatalf("CanTake = %v, want %v", got, tt.want)
			}
		})
	}
}
