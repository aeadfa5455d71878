package conf

import "testing"

// TestRebalanceTable checks that [pools.rebalance] is nil while absent,
// takes its defaults when present and empty, and keeps the values set.
func TestRebalanceTable(t *testing.T) {
	cfg, err := Load("../testdata/conf/valid/rebalance.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []*Rebalance{{Tolerance: 0.05, Rate: 2.5}, {Tolerance: 0.1, Rate: 10}, nil}
	for i, w := range want {
		got := cfg.Pools[i].Rebalance
		switch {
		case w == nil && got != nil:
			t.Errorf("pool %s: rebalance %+v, want none", cfg.Pools[i].Name, *got)
		case w != nil && (got == nil || *got != *w):
			t.Errorf("pool %s: rebalance %+v, want %+v", cfg.Pools[i].Name, got, *w)
		}
	}
}
