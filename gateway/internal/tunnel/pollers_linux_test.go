package tunnel

import "testing"

// TestDefaultPollers pins the default poller count: one per two cores,
// rounded up, and never none.
func TestDefaultPollers(t *testing.T) {
	for _, c := range []struct{ procs, want int }{
		{0, 1}, {1, 1}, {2, 1}, {3, 2}, {4, 2}, {8, 4}, {64, 32},
	} {
		if got := defaultPollers(c.procs); got != c.want {
			t.Errorf("defaultPollers(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}
