package testproc

import (
	"strings"
	"testing"
)

// TestCappedBuffer: a test's log keeps its first maxLog bytes, counts the
// rest, and every write reports itself whole (a short count would be an
// error to slog's handler).
func TestCappedBuffer(t *testing.T) {
	var c cappedBuffer
	line := strings.Repeat("x", 1000) + "\n"
	for range maxLog/len(line) + 10 {
		if n, err := c.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(line))
		}
	}
	written := (maxLog/len(line) + 10) * len(line)
	if c.b.Len() != maxLog || c.dropped != written-maxLog {
		t.Fatalf("kept %d, dropped %d; want %d and %d", c.b.Len(), c.dropped, maxLog, written-maxLog)
	}
}
