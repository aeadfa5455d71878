package h2core

import (
	"testing"
)

// testWriter is a stream's writer that counts its wake-ups.
type testWriter struct {
	send  Send
	wakes int
}

func (w *testWriter) SendHalf() *Send { return &w.send }
func (w *testWriter) WakeWrite()      { w.wakes++ }

func newConnSend(streams ...*testWriter) (*ConnSend[*testWriter], func(func(*testWriter) bool)) {
	c := new(ConnSend[*testWriter])
	c.Init()
	return c, func(yield func(*testWriter) bool) {
		for _, w := range streams {
			if !yield(w) {
				return
			}
		}
	}
}

// TestSendWindowArithmetic follows a stream's send window through DATA,
// WINDOW_UPDATEs and changes of SETTINGS_INITIAL_WINDOW_SIZE (RFC 9113
// section 6.9.2): a smaller setting can make a window negative, which
// DATA then waits out; a larger one, or an update, past 2^31-1 is an
// overflow, and then changes nothing.
func TestSendWindowArithmetic(t *testing.T) {
	a := new(testWriter)
	c, streams := newConnSend(a)
	c.ConnUpdate(1 << 20)
	steps := []struct {
		name     string
		do       func() bool // reports an overflow
		overflow bool
		window   int64 // a's window after
	}{
		{"DATA of 60000", func() bool { return c.Take(a, 60000, 1<<20) != 60000 }, false, 5535},
		{"setting down to 1000: negative", func() bool { return c.SetPeerWindow(1000, streams) }, false, -59000},
		{"no DATA with a negative window", func() bool { return c.Take(a, 1, 1<<20) != 0 }, false, -59000},
		{"an update of 59000 brings it to 0", func() bool { return c.StreamUpdate(a, 59000) }, false, 0},
		{"setting back up", func() bool { return c.SetPeerWindow(DefaultWindow, streams) }, false, 64535},
		{"an update to exactly 2^31-1", func() bool { return c.StreamUpdate(a, MaxWindow-64535) }, false, MaxWindow},
		{"a setting one larger overflows", func() bool { return c.SetPeerWindow(DefaultWindow+1, streams) }, true, MaxWindow},
		{"DATA of 1", func() bool { return c.Take(a, 1, 1<<20) != 1 }, false, MaxWindow - 1},
		{"an update of 2 overflows", func() bool { return c.StreamUpdate(a, 2) }, true, MaxWindow + 1},
	}
	for _, st := range steps {
		if got := st.do(); got != st.overflow {
			t.Fatalf("%s: overflow (or short take) %v, want %v", st.name, got, st.overflow)
		}
		if w := c.StreamWindow(a); w != st.window {
			t.Fatalf("%s: window %d, want %d", st.name, w, st.window)
		}
	}
	if c.ConnUpdate(MaxWindow) != true {
		t.Fatal("the connection's window past 2^31-1 is no overflow")
	}
}

// TestTakeBounds pins what one Take takes: the least of what is wanted,
// one frame, the stream's window and the connection's.
func TestTakeBounds(t *testing.T) {
	tests := []struct {
		name              string
		want, frame       int
		streamUp, connUp  uint32
		got               int
		connLeft, strLeft int64
	}{
		{"want", 100, 16384, 0, 0, 100, DefaultWindow - 100, DefaultWindow - 100},
		{"frame", 100000, 16384, 0, 0, 16384, DefaultWindow - 16384, DefaultWindow - 16384},
		{"stream", 100000, 1 << 20, 0, 1 << 20, DefaultWindow, DefaultWindow + 1<<20 - DefaultWindow, 0},
		{"connection", 100000, 1 << 20, 1 << 20, 0, DefaultWindow, 0, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := new(testWriter)
			c, _ := newConnSend(a)
			c.StreamUpdate(a, tt.streamUp)
			c.ConnUpdate(tt.connUp)
			if got := c.Take(a, tt.want, tt.frame); got != tt.got {
				t.Fatalf("took %d, want %d", got, tt.got)
			}
			if c.Window() != tt.connLeft || c.StreamWindow(a) != tt.strLeft {
				t.Fatalf("left %d on the connection and %d on the stream, want %d and %d", c.Window(), c.StreamWindow(a), tt.connLeft, tt.strLeft)
			}
		})
	}
}

// TestConnWindowPassedOn pins the one-waiter pass-on: a connection
// WINDOW_UPDATE wakes the first writer waiting for it, not all; the one
// woken, once it took what it needs, passes what is left to the next; a
// writer that leaves without taking passes it on too.
func TestConnWindowPassedOn(t *testing.T) {
	ws := []*testWriter{new(testWriter), new(testWriter), new(testWriter)}
	c, _ := newConnSend(ws...)
	for _, w := range ws {
		c.StreamUpdate(w, 1<<20)
	}
	c.Take(ws[0], DefaultWindow, 1<<20) // the connection's window is spent
	for _, w := range ws {
		if !c.Wait(w) {
			t.Fatal("a writer with window of its own does not wait for the connection's")
		}
	}
	if c.ConnWaiters() != 3 {
		t.Fatalf("%d waiters, want 3", c.ConnWaiters())
	}
	wakes := func() [3]int { return [3]int{ws[0].wakes, ws[1].wakes, ws[2].wakes} }
	c.ConnUpdate(100)
	if got := wakes(); got != [3]int{1, 0, 0} {
		t.Fatalf("an update woke %v, want the first only", got)
	}
	// The first takes 40 of the 100 and passes the rest on.
	c.Unwait(ws[0])
	if n := c.Take(ws[0], 40, 1<<20); n != 40 {
		t.Fatalf("took %d", n)
	}
	c.Pass()
	if got := wakes(); got != [3]int{1, 1, 0} {
		t.Fatalf("after the first took its share: woken %v, want the second", got)
	}
	// The second leaves (its deadline passed) without taking: the third.
	c.Leave(ws[1])
	if got := wakes(); got != [3]int{1, 1, 1} {
		t.Fatalf("after the second left: woken %v, want the third", got)
	}
	if c.ConnWaiters() != 0 {
		t.Fatalf("%d waiters left", c.ConnWaiters())
	}
	// With nothing left, nobody is woken.
	c.Take(ws[2], 60, 1<<20)
	c.Wait(ws[2])
	c.Pass()
	if got := wakes(); got != [3]int{1, 1, 1} {
		t.Fatalf("with no window left: woken %v", got)
	}
}

// TestOwnWindowWaiters pins the writers waiting for window of their own:
// a woken one gives the connection's window it was woken for to the next,
// a larger SETTINGS_INITIAL_WINDOW_SIZE wakes those it opens only, and a
// stream's WINDOW_UPDATE wakes its writer.
func TestOwnWindowWaiters(t *testing.T) {
	a, b, d := new(testWriter), new(testWriter), new(testWriter)
	c, streams := newConnSend(a, b, d)
	c.ConnUpdate(1 << 20)
	c.Take(a, DefaultWindow, 1<<20)    // a: 0 left
	c.Take(b, DefaultWindow-10, 1<<20) // b: 10 left
	c.SetPeerWindow(DefaultWindow-100, streams)
	// a: -100, b: -90; both wait for their own.
	for _, w := range []*testWriter{a, b} {
		if c.Wait(w) {
			t.Fatal("a writer with its own window spent waits for the connection's")
		}
	}
	c.SetPeerWindow(DefaultWindow-95, streams) // b: -85, a: -95
	if a.wakes+b.wakes != 0 {
		t.Fatalf("a setting that opens no window woke %d", a.wakes+b.wakes)
	}
	c.SetPeerWindow(DefaultWindow+5, streams) // b: 15, a: 5
	if a.wakes != 1 || b.wakes != 1 || d.wakes != 0 {
		t.Fatalf("a setting that opens both woke a %d, b %d, d %d times", a.wakes, b.wakes, d.wakes)
	}
	c.Take(a, 5, 1<<20)
	c.Wait(a)
	c.StreamUpdate(a, 1)
	if a.wakes != 2 {
		t.Fatalf("a stream WINDOW_UPDATE woke its waiting writer %d times in all, want 2", a.wakes)
	}
	c.StreamUpdate(d, 1)
	if d.wakes != 0 {
		t.Fatal("a WINDOW_UPDATE woke a writer that does not wait")
	}
}

// TestShareLimit pins the client role's option: past ShareLimit
// uncredited bytes a stream waits while another waits for the
// connection's window, is woken when the last such leaves, and alone
// goes on; a credit of its own brings it back under its limit.
func TestShareLimit(t *testing.T) {
	a, b, d := new(testWriter), new(testWriter), new(testWriter)
	c, _ := newConnSend(a, b, d)
	c.ShareLimit = 1000
	for _, w := range []*testWriter{a, b, d} {
		c.StreamUpdate(w, 1<<24)
	}
	c.ConnUpdate(1 << 20)
	if n := c.Take(a, 5000, 1<<20); n != 1000 {
		t.Fatalf("a stream took %d up to its limit, want 1000", n)
	}
	if n := c.Take(a, 4000, 1<<20); n != 4000 {
		t.Fatalf("alone, a stream took %d of 4000 past its limit", n)
	}
	for c.Take(a, 1<<30, 1<<30) > 0 { // alone, it spends the connection's window
	}
	if !c.Wait(b) || !c.Wait(d) {
		t.Fatal("with the connection's window spent, a stream does not wait for it")
	}
	c.ConnUpdate(100) // b is woken, d still waits
	if n := c.Take(a, 10, 1<<20); n != 0 {
		t.Fatalf("past its limit with another waiting, a stream took %d", n)
	}
	if c.Wait(a) {
		t.Fatal("held at its limit, a stream waits for the connection's window")
	}
	c.Unwait(b)
	c.Take(b, 10, 1<<20)
	c.Pass() // d is woken: nobody waits for the connection's window
	if a.wakes != 1 || d.wakes != 1 {
		t.Fatalf("the last waiter leaving woke the held stream %d times and d %d, want 1 each", a.wakes, d.wakes)
	}
	c.Unwait(a)
	if n := c.Take(a, 10, 1<<20); n != 10 {
		t.Fatalf("with nobody waiting, the held stream took %d of 10", n)
	}
	// A credit of its own brings a held stream under its limit: woken.
	for c.Take(a, 1<<30, 1<<30) > 0 {
	}
	c.Wait(b)
	c.Wait(d)
	c.ConnUpdate(100)
	c.Take(a, 10, 1<<20)
	c.Wait(a)
	c.StreamUpdate(a, uint32(c.Uncredited(a)-10))
	if a.wakes != 2 || c.Uncredited(a) != 10 {
		t.Fatalf("after its credit: woken %d times, %d uncredited; want 2 and 10", a.wakes, c.Uncredited(a))
	}
}
