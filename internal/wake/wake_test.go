package wake

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestWake(t *testing.T) {
	ch := New()
	// A signal with nobody waiting is kept, once.
	Signal(ch)
	Signal(ch)
	if err := Wait(ch, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("kept signal: %v", err)
	}
	if err := Wait(ch, time.Now().Add(20*time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second wait: %v, want the deadline", err)
	}
	if err := Wait(ch, time.Now().Add(-time.Second)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past deadline: %v", err)
	}
	go func() { time.Sleep(10 * time.Millisecond); Signal(ch) }()
	if err := Wait(ch, time.Time{}); err != nil {
		t.Fatalf("no deadline: %v", err)
	}
}
