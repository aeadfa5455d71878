package penalty

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

// TestRecordDoublesAndForgives walks one peer through cuts in a row (the
// refusal doubles up to Max), cuts during a refusal (they double too),
// and good behaviour (one step forgiven per Max after the refusal ends).
func TestRecordDoublesAndForgives(t *testing.T) {
	p := Policy{First: time.Second, Max: 60 * time.Second}
	steps := []struct {
		at     time.Duration // since t0
		cut    bool
		want   time.Duration // Cut's refusal, or Left when not a cut
		streak int
	}{
		{0, true, time.Second, 1},
		{500 * time.Millisecond, false, 500 * time.Millisecond, 1},
		{time.Second, false, 0, 1},
		{1100 * time.Millisecond, true, 2 * time.Second, 2}, // back at once, cut again
		{1200 * time.Millisecond, true, 4 * time.Second, 3}, // a connection opened before: cut while refused
		{6 * time.Second, true, 8 * time.Second, 4},
		{15 * time.Second, true, 16 * time.Second, 5},
		{32 * time.Second, true, 32 * time.Second, 6},
		{65 * time.Second, true, 60 * time.Second, 7}, // capped at Max
		{126 * time.Second, true, 60 * time.Second, 7},
		// Refused until 186s; two Max later (306s) two steps are forgiven.
		{306 * time.Second, true, 32 * time.Second, 6},
		// Until 338s; 7 x Max later everything is forgiven.
		{338*time.Second + 7*60*time.Second, true, time.Second, 1},
	}
	var r Record
	for i, s := range steps {
		now := t0.Add(s.at)
		if !s.cut {
			if got := r.Left(now); got != s.want {
				t.Fatalf("step %d: Left = %v, want %v", i, got, s.want)
			}
			continue
		}
		d, n := r.Cut(now, p)
		if d != s.want || n != s.streak {
			t.Fatalf("step %d: Cut = %v, streak %d; want %v, %d", i, d, n, s.want, s.streak)
		}
	}
}

// TestPolicyLengths checks the refusal by streak for odd policies: Max
// below First, Max not a doubling of First, the back-off off.
func TestPolicyLengths(t *testing.T) {
	cases := []struct {
		p    Policy
		cuts int
		want time.Duration
	}{
		{Policy{time.Second, 60 * time.Second}, 1, time.Second},
		{Policy{time.Second, 60 * time.Second}, 6, 32 * time.Second},
		{Policy{time.Second, 60 * time.Second}, 40, 60 * time.Second},
		{Policy{3 * time.Second, 10 * time.Second}, 2, 6 * time.Second},
		{Policy{3 * time.Second, 10 * time.Second}, 3, 10 * time.Second},
		{Policy{5 * time.Second, time.Second}, 3, 5 * time.Second}, // Max below First: First
		{Policy{time.Second, 0}, 3, time.Second},
		{Policy{0, time.Minute}, 3, 0}, // off
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v-%v-x%d", c.p.First, c.p.Max, c.cuts), func(t *testing.T) {
			var r Record
			var d time.Duration
			for range c.cuts {
				d, _ = r.Cut(t0, c.p)
			}
			if d != c.want {
				t.Fatalf("after %d cuts: %v, want %v", c.cuts, d, c.want)
			}
		})
	}
}

// TestTableForgetsAndIsBounded checks that a table keeps no record of a
// peer once forgiven (Left and Sweep drop it: the count returns to zero),
// that it never holds more than its capacity however many peers are cut,
// that a peer never cut is never refused, and that a policy turned off
// drops every record.
func TestTableForgetsAndIsBounded(t *testing.T) {
	p := Policy{First: time.Second, Max: 4 * time.Second}
	tab := NewTable[int](p, 100)
	if d, _ := tab.Cut(1, t0); d != time.Second {
		t.Fatalf("first cut: %v", d)
	}
	if tab.Left(1, t0) != time.Second || tab.Left(2, t0) != 0 {
		t.Fatal("the cut peer is not refused, or another is")
	}
	// Refused until t0+1s, one step forgiven per 4s after: gone at 5s.
	if n := tab.Sweep(t0.Add(4 * time.Second)); n != 1 {
		t.Fatalf("kept %d records before the streak is forgiven, want 1", n)
	}
	if n := tab.Sweep(t0.Add(5 * time.Second)); n != 0 {
		t.Fatalf("kept %d records once forgiven, want 0", n)
	}
	// Many peers, each cut: the table stays at its capacity.
	for k := range 10_000 {
		tab.Cut(k, t0.Add(10*time.Second))
		if n := len(tab.m); n > 100 {
			t.Fatalf("%d records after %d cuts, capacity 100", n, k+1)
		}
	}
	if n := tab.Sweep(t0.Add(10 * time.Second)); n != 100 {
		t.Fatalf("kept %d, want the capacity, 100", n)
	}
	// Cuts at a later time find forgiven records first.
	tab.Cut(-1, t0.Add(time.Hour))
	if tab.Left(-1, t0.Add(time.Hour)) != time.Second {
		t.Fatal("a new peer's cut did not refuse it")
	}
	if n := tab.Sweep(t0.Add(time.Hour)); n != 1 {
		t.Fatalf("kept %d records an hour later, want the one just cut", n)
	}
	tab.Set(Policy{}, 100)
	if n := tab.Sweep(t0.Add(time.Hour)); n != 0 || tab.Left(-1, t0.Add(time.Hour)) != 0 {
		t.Fatal("records kept with the back-off off")
	}
	if d, _ := tab.Cut(5, t0); d != 0 || tab.Sweep(t0) != 0 {
		t.Fatal("a cut with the back-off off was noted")
	}
	tab.Set(p, 3)
	for k := range 10 {
		tab.Cut(k, t0)
	}
	tab.Set(p, 2)
	if n := tab.Sweep(t0); n != 2 {
		t.Fatalf("kept %d after the capacity went down to 2", n)
	}
}
