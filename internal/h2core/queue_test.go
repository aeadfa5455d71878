package h2core

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// lostError is what the tests' Lost wraps causes in.
type lostError struct{ cause error }

func (e *lostError) Error() string { return "lost: " + e.cause.Error() }
func (e *lostError) Unwrap() error { return e.cause }

// recConn is a net.Conn that records its writes and write deadlines;
// Write blocks while hold is not nil and open, and fails with fail.
type recConn struct {
	net.Conn
	mu        sync.Mutex
	out       bytes.Buffer
	writes    []int // sizes
	deadlines []int // deadlines set before each write (index: write)
	pending   int   // deadlines set since the last write
	hold      chan struct{}
	fail      error
}

func (c *recConn) Write(p []byte) (int, error) {
	if c.hold != nil {
		<-c.hold
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, len(p))
	c.deadlines = append(c.deadlines, c.pending)
	c.pending = 0
	return c.out.Write(p)
}

func (c *recConn) SetWriteDeadline(time.Time) error {
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
	return nil
}

func newTestQueue(cut *[]error) (*Queue, *sync.Mutex) {
	var mu sync.Mutex
	q := NewQueue(&mu, QueueConfig{
		WriteTimeout: time.Minute,
		Lost:         func(cause error) error { return &lostError{cause} },
		Cut:          func(err error) { *cut = append(*cut, err) },
	})
	q.NewFramer(nil)
	return q, &mu
}

// data queues n bytes of DATA frames of at most 16 KiB.
func data(t *testing.T, q *Queue, n int) {
	t.Helper()
	for n > 0 {
		k := min(n, 16384)
		if err := q.Queue(func(fr *http2.Framer) error { return fr.WriteData(1, false, make([]byte, k)) }); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

// TestQueueWriteDeadlines: Flush sets a deadline for each write of at
// most WriteChunk bytes, not one for the backlog; FlushNow sets one for
// all of it, or none (the handshake's own).
func TestQueueWriteDeadlines(t *testing.T) {
	const backlog = 200 << 10 // 13 DATA frames of 16 KiB and a rest
	frames := backlog / 16384
	if backlog%16384 != 0 {
		frames++
	}
	size := backlog + 9*frames
	cases := []struct {
		name          string
		flush         func(q *Queue, nc net.Conn) (FlushStats, error)
		writes        int
		deadlines     []int // set before each write
		reportsFrames bool
	}{
		{"Flush: one deadline per 64 KiB", func(q *Queue, nc net.Conn) (FlushStats, error) { return q.Flush(nc) },
			(size + WriteChunk - 1) / WriteChunk, []int{1, 1, 1, 1}, true},
		{"FlushNow within: one for all", func(q *Queue, nc net.Conn) (FlushStats, error) {
			_, err := q.FlushNow(nc, time.Hour, nil)
			return FlushStats{}, err
		}, (size + WriteChunk - 1) / WriteChunk, []int{1, 0, 0, 0}, false},
		{"FlushNow under the conn's deadline: none", func(q *Queue, nc net.Conn) (FlushStats, error) {
			_, err := q.FlushNow(nc, 0, nil)
			return FlushStats{}, err
		}, (size + WriteChunk - 1) / WriteChunk, []int{0, 0, 0, 0}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cut []error
			q, _ := newTestQueue(&cut)
			data(t, q, backlog)
			nc := &recConn{}
			st, err := tc.flush(q, nc)
			if err != nil {
				t.Fatal(err)
			}
			if len(nc.writes) != tc.writes {
				t.Fatalf("%d writes %v, want %d", len(nc.writes), nc.writes, tc.writes)
			}
			for i, n := range nc.writes {
				if n > WriteChunk {
					t.Fatalf("write %d of %d bytes, over WriteChunk", i, n)
				}
			}
			if nc.out.Len() != size {
				t.Fatalf("wrote %d bytes, want %d", nc.out.Len(), size)
			}
			if got := nc.deadlines; !equalInts(got, tc.deadlines) {
				t.Fatalf("deadlines set before each write: %v, want %v", got, tc.deadlines)
			}
			if tc.reportsFrames && (st.Frames != frames || st.Writes != tc.writes) {
				t.Fatalf("FlushStats %+v, want %d frames in %d writes", st, frames, tc.writes)
			}
			if q.Len() != 0 {
				t.Fatalf("%d bytes left queued", q.Len())
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var pingAck = func(fr *http2.Framer) error { return fr.WritePing(true, [8]byte{}) }

const ackSize = 9 + 8

// answer queues answers worth frac of MaxAnswerBytes; it returns the
// first error.
func answer(q *Queue, frac float64) error {
	for range int(frac * MaxAnswerBytes / ackSize) {
		if err := q.Answer(pingAck); err != nil {
			return err
		}
	}
	return nil
}

// TestQueueAnswersCountUntilWritten: answers count against
// MaxAnswerBytes while queued and while their write is under way, and
// no longer once written; past the bound the queue is cut once
// (ENHANCE_YOUR_CALM) and queues nothing more.
func TestQueueAnswersCountUntilWritten(t *testing.T) {
	cases := []struct {
		name    string
		first   float64
		between string // "write", "hold" (a write under way), "partial" (FlushNB took part), "none"
		second  float64
		cut     bool
	}{
		{"within the bound", 0.9, "none", 0, false},
		{"queued past the bound", 0.6, "none", 0.5, true},
		{"written, then as much again", 0.6, "write", 0.6, false},
		{"past the bound with part in a write", 0.6, "hold", 0.5, true},
		{"past the bound with part left by a poller's write", 0.6, "partial", 0.5, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cut []error
			q, _ := newTestQueue(&cut)
			if err := answer(q, tc.first); err != nil {
				t.Fatal(err)
			}
			nc := &recConn{}
			var wg sync.WaitGroup
			switch tc.between {
			case "write":
				if _, err := q.Flush(nc); err != nil {
					t.Fatal(err)
				}
			case "hold":
				nc.hold = make(chan struct{})
				wg.Add(1)
				go func() { defer wg.Done(); q.Flush(nc) }()
				for i := 0; q.Len() > 0; i++ {
					if i == 10000 {
						t.Fatal("the write never took the queue")
					}
					time.Sleep(time.Millisecond)
				}
			case "partial":
				if err := q.FlushNB(func(b []byte) (int, error) { return len(b) / 2, nil }); err != nil {
					t.Fatal(err)
				}
				select {
				case <-q.Kicked():
				default:
					t.Fatal("a poller's short write did not kick the writer")
				}
			}
			err := answer(q, tc.second)
			if nc.hold != nil {
				close(nc.hold)
				wg.Wait()
			}
			var ce ConnError
			if !tc.cut {
				if err != nil || len(cut) != 0 {
					t.Fatalf("cut (%v, %v) within the bound", err, cut)
				}
				return
			}
			if !errors.As(err, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm || len(cut) != 1 || cut[0] != err {
				t.Fatalf("past the bound: %v (Cut called with %v), want one cut of ENHANCE_YOUR_CALM", err, cut)
			}
			var lost *lostError
			if qerr := q.Queue(pingAck); !errors.As(qerr, &lost) {
				t.Fatalf("queue after the cut: %v, want the cut", qerr)
			}
		})
	}
}

// TestQueueFlushNB: a poller's write that the socket takes in part
// leaves the rest first in the queue, ahead of what was queued after;
// a failed write breaks the queue for every writer.
func TestQueueFlushNB(t *testing.T) {
	var cut []error
	q, mu := newTestQueue(&cut)
	mu.Lock()
	q.AppendLocked([]byte("0123456789")...)
	mu.Unlock()
	taken := 0
	if err := q.FlushNB(func(b []byte) (int, error) { taken = 4; return 4, nil }); err != nil || taken != 4 {
		t.Fatal(err)
	}
	mu.Lock()
	q.AppendLocked([]byte("abc")...)
	mu.Unlock()
	nc := &recConn{}
	if _, err := q.Flush(nc); err != nil {
		t.Fatal(err)
	}
	if got := nc.out.String(); got != "456789abc" {
		t.Fatalf("the next writer wrote %q, want the rest first", got)
	}
	mu.Lock()
	q.AppendLocked('x')
	mu.Unlock()
	boom := errors.New("boom")
	err := q.FlushNB(func([]byte) (int, error) { return 0, boom })
	var lost *lostError
	if !errors.As(err, &lost) || !errors.Is(err, boom) {
		t.Fatalf("failed write: %v, want it lost", err)
	}
	if _, again := q.Flush(nc); again != err {
		t.Fatalf("Flush after a failed write: %v, want %v", again, err)
	}
	if qerr := q.Queue(pingAck); qerr != err {
		t.Fatalf("Queue after a failed write: %v, want %v", qerr, err)
	}
}

// TestQueueFailWritesWhatIsQueued: a queue that fails (its connection
// ends) queues nothing more but still writes what it holds (a GOAWAY);
// a held writer makes FlushNow give up and FlushNB only kick.
func TestQueueFailWritesWhatIsQueued(t *testing.T) {
	var cut []error
	q, mu := newTestQueue(&cut)
	taken := 0
	q.cfg.Taken = func() { taken++ }
	if err := q.Queue(func(fr *http2.Framer) error { return fr.WriteGoAway(0, http2.ErrCodeNo, nil) }); err != nil {
		t.Fatal(err)
	}
	ended := errors.New("ended")
	mu.Lock()
	q.FailLocked(ended)
	mu.Unlock()
	if err := q.Queue(pingAck); err != ended {
		t.Fatalf("queue after FailLocked: %v", err)
	}
	nc := &recConn{hold: make(chan struct{})}
	done := make(chan error, 1)
	go func() { _, err := q.Flush(nc); done <- err }()
	for i := 0; !q.Writing(); i++ {
		if i == 10000 {
			t.Fatal("no write under way")
		}
		time.Sleep(time.Millisecond)
	}
	if ok, _ := q.FlushNow(nc, time.Second, nil); ok {
		t.Fatal("FlushNow wrote with a write under way")
	}
	if err := q.FlushNB(func(b []byte) (int, error) { t.Error("FlushNB wrote with a write under way"); return len(b), nil }); err != nil {
		t.Fatal(err)
	}
	close(nc.hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if taken != 1 || nc.out.Len() != 9+8 {
		t.Fatalf("Taken called %d times, %d bytes written; want the GOAWAY once", taken, nc.out.Len())
	}
}
