package throttle

import (
	"testing"
	"time"
)

// TestLinesCountEveryError checks that a flood gives one line an interval
// and that every error is in a line's count or still pending.
func TestLinesCountEveryError(t *testing.T) {
	const every = time.Second
	t0 := time.Unix(1000, 0)
	var l Lines
	steps := []struct {
		at      time.Duration
		n       int
		due     bool
		pending int
	}{
		{0, 1, true, 0}, // the first error is a line at once
		{100 * time.Millisecond, 0, false, 1},
		{900 * time.Millisecond, 0, false, 2},
		{time.Second, 3, true, 0}, // an interval after the last line: the count so far
		{1500 * time.Millisecond, 0, false, 1},
	}
	for i, s := range steps {
		n, due := l.Note(t0.Add(s.at), every)
		if n != s.n || due != s.due || l.Pending() != s.pending {
			t.Fatalf("step %d: Note = %d, %t, pending %d; want %d, %t, %d", i, n, due, l.Pending(), s.n, s.due, s.pending)
		}
	}
	if w := l.Wait(t0.Add(1500*time.Millisecond), every); w != 500*time.Millisecond {
		t.Fatalf("Wait = %v, want 500ms", w)
	}
	if n := l.Take(t0.Add(2 * time.Second)); n != 1 || l.Pending() != 0 {
		t.Fatalf("Take = %d, pending %d; want 1, 0", n, l.Pending())
	}
}
