package testproc

import (
	"log/slog"
	"strconv"
	"testing"
)

// maxLog bounds what Logger keeps of one test's log.
const maxLog = 1 << 20

// cappedBuffer is a Buffer that keeps the first maxLog bytes and counts
// the rest.
type cappedBuffer struct {
	Buffer
	dropped int
}

// Write keeps what fits of p and counts the rest; it never fails.
func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := min(len(p), max(maxLog-c.b.Len(), 0))
	c.dropped += len(p) - keep
	c.b.Write(p[:keep])
	return len(p), nil
}

// Logger returns a logger for what a test runs in process (a relay, a
// bus): its lines are kept and printed with tb's log only if tb fails, so
// that a passing test prints nothing (slog.Default prints every line to
// the test binary's output). They are printed at tb's cleanup: call
// Logger before starting what logs, so that the cleanups that stop it,
// registered later and so run earlier, are logged too.
func Logger(tb testing.TB) *slog.Logger {
	buf := &cappedBuffer{}
	tb.Cleanup(func() {
		if !tb.Failed() {
			return
		}
		buf.mu.Lock()
		text, dropped := buf.b.String(), buf.dropped
		buf.mu.Unlock()
		if dropped > 0 {
			text += "(" + strconv.Itoa(dropped) + " bytes more not kept)\n"
		}
		tb.Logf("--- log of the test's in-process servers:\n%s", text)
	})
	return slog.New(slog.NewTextHandler(buf, nil))
}
