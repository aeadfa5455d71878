package tunnel

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// errSpin is what steppedConn returns once a write has been tried far
// more often than waiting at deadlines allows.
var errSpin = errors.New("write tried again and again at an expired deadline")

// steppedConn is a socket that takes no byte and whose write deadlines
// fire as the runtime's do across a backward step of the wall clock: the
// runtime turns a deadline into a monotonic instant when it is set, so
// one set before the step fires early by the step as the wall clock reads
// it; one set after fires when asked.
type steppedConn struct {
	net.Conn // nil: only Write and SetWriteDeadline are used

	mu     sync.Mutex
	step   time.Duration // how early the next deadline set fires
	fireAt time.Time
	writes int
}

func (c *steppedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fireAt = t.Add(-c.step)
	c.step = 0 // the clock has stepped: later deadlines are right
	return nil
}

func (c *steppedConn) Write([]byte) (int, error) {
	c.mu.Lock()
	c.writes++
	at, writes := c.fireAt, c.writes
	c.mu.Unlock()
	if writes > 1000 {
		return 0, errSpin
	}
	time.Sleep(time.Until(at))
	return 0, os.ErrDeadlineExceeded
}

// TestTLSSocketRearmsAfterClockStep pins issue 19 item 2's rule: a
// TLSSocket kept its write deadline as wall-clock Unix ns and, when the
// next deadline it wanted was the one it had set, did not set it again.
// After a backward step of the wall clock the runtime's deadline (which is
// monotonic) had fired while by the wall clock the write's limit was still
// ahead: every later write failed at once, a spin for the length of the
// step. The socket's clocks are monotonic now, and a deadline that fired
// is always set again. No test can step the machine's clock; steppedConn
// fires the first deadline 400 ms early, as the runtime does after such a
// step.
func TestTLSSocketRearmsAfterClockStep(t *testing.T) {
	c := &steppedConn{step: 400 * time.Millisecond}
	s := NewTLSSocket(c)
	_ = s.SetWriteDeadline(time.Now().Add(600 * time.Millisecond))
	n, err := s.Write([]byte("record"))
	t.Logf("%d writes tried", c.writes)
	if errors.Is(err, errSpin) {
		t.Fatalf("write tried %d times: it spins on the deadline that fired early", c.writes)
	}
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write: %d, %v; want 0, the deadline's error", n, err)
	}
	// The early wake and the wait to the real deadline.
	if c.writes > 3 {
		t.Errorf("write tried %d times, want at most 3", c.writes)
	}
}
