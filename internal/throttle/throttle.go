// Package throttle keeps a flood of one error to one log line an
// interval, each line carrying the count since the one before.
package throttle

import "time"

// Lines spaces out the log lines about an error that can come in
// floods: at most one line per interval, each with the number of errors
// since the line before, so a flood costs one line a second and loses no
// count. It is not safe for concurrent use: its owner locks.
type Lines struct {
	n    int       // errors not yet in a line
	last time.Time // when the last line was written
}

// Note counts one error at now. It reports whether a line is due (every
// has passed since the last one) and, if so, the count the line carries,
// which is then taken.
func (t *Lines) Note(now time.Time, every time.Duration) (int, bool) {
	t.n++
	if now.Sub(t.last) < every {
		return 0, false
	}
	return t.Take(now), true
}

// Take returns the errors not yet in a line and notes a line written at now.
func (t *Lines) Take(now time.Time) int {
	n := t.n
	t.n, t.last = 0, now
	return n
}

// Pending is the number of errors not yet in a line.
func (t *Lines) Pending() int { return t.n }

// Wait is how long after now the next line may be written.
func (t *Lines) Wait(now time.Time, every time.Duration) time.Duration {
	return every - now.Sub(t.last)
}
