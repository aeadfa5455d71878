package h2

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
)

// TestEndedStreamStopsWaiting: a WriteNB that falls short on the
// connection's window counts its stream as waiting for it; the stream then
// ends (its tunnel closed) without another WriteNB. It must leave the
// count, or every later stream is held at StreamSendLimit for good: a lone
// stream then stops at 64 KiB against a node that credits a stream only at
// half its window.
func TestEndedStreamStopsWaiting(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := n.openOK(c)
	a.Notify(func() {})
	if got, err := a.WriteNB([][]byte{make([]byte, 70000)}); got != defaultWindow || err != nil {
		t.Fatalf("WriteNB took %d, %v; want the connection's %d", got, err, defaultWindow)
	}
	a.Abort()
	c.mu.Lock()
	w := c.send.ConnWaiters()
	c.mu.Unlock()
	if w != 0 {
		t.Fatalf("%d streams wait for the window after the only waiting one ended", w)
	}
	// Now as TestLoneStreamPassesItsLimit.
	writeAloneAgainstHalfWindowCredit(t, c, n)
}

// TestReadBufferKeepsItsSize: a frame straddling the end of a polled
// connection's read buffer is moved to its front, not given a buffer of
// exactly the bytes it lacks (after which every read would be tiny).
func TestReadBufferKeepsItsSize(t *testing.T) {
	c := &Conn{}
	c.fr = http2.NewFramer(nil, &c.src)
	c.fr.SetMaxReadFrameSize(defaultMaxFrameSize)
	unknown := func(n int) []byte {
		b := []byte{byte(n >> 16), byte(n >> 8), byte(n), 0xf0, 0, 0, 0, 0, 0}
		return append(b, make([]byte, n)...)
	}
	c.rb = make([]byte, 0, pollReadSize)
	c.rb = append(c.rb, unknown(pollReadSize-9-3)...)
	c.rb = append(c.rb, unknown(100)[:3]...)
	if err := c.handleBuffered(); err != nil {
		t.Fatal(err)
	}
	if len(c.rb) != 3 || cap(c.rb) < pollReadSize {
		t.Errorf("read buffer holds %d bytes in %d, want 3 in at least %d", len(c.rb), cap(c.rb), pollReadSize)
	}
}

// TestLongHeaderBlockReadCost: a header block of HEADERS and 60 KiB of
// empty CONTINUATION frames, in one write, costs a polled connection a
// buffer of about its size, not one allocation per frame it lacks.
func TestLongHeaderBlockReadCost(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
	unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	block := hb.Bytes()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1]})
	for buf.Len() < 60<<10 {
		fr.WriteContinuation(1, false, nil)
	}
	fr.WriteContinuation(1, true, block[1:])
	for wire := buf.Bytes(); len(wire) > 0; {
		n, err := unix.Write(fds[1], wire)
		if err != nil {
			t.Fatal(err)
		}
		wire = wire[n:]
	}
	c := &Conn{streams: map[uint32]*Stream{}, nextID: 3, cfg: Config{}.withDefaults()}
	c.fr = http2.NewFramer(nil, &c.src)
	c.fr.SetMaxReadFrameSize(defaultMaxFrameSize)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(headerTableSize, nil)
	c.fr.MaxHeaderListSize = 16 << 10
	c.pfd = fds[0]
	c.rb = make([]byte, 0, pollReadSize)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range 100 { // bounded: each call reads until its budget or EAGAIN
		if _, more := c.PollRead(fds[0], false); !more {
			break
		}
	}
	runtime.ReadMemStats(&m1)
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 4<<20 {
		t.Errorf("reading a %d-byte header block allocated %d bytes", buf.Len(), got)
	}
}

// TestConnWindowWakesOnlyItsWaiters: a WINDOW_UPDATE on the connection
// notifies the stream waiting for the connection's window, not every
// stream on it: with thousands of idle streams a pass over all of them on
// each update would cost the connection's reader more than the frames.
func TestConnWindowWakesOnlyItsWaiters(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	notified := make([]atomic.Int32, 20)
	var streams []*Stream
	for i := range notified {
		s, _ := n.openOK(c)
		s.Notify(func() { notified[i].Add(1) })
		streams = append(streams, s)
	}
	if got, err := streams[0].WriteNB([][]byte{make([]byte, 70000)}); got != defaultWindow || err != nil {
		t.Fatalf("WriteNB took %d, %v; want the connection's %d", got, err, defaultWindow)
	}
	n.fr.WriteWindowUpdate(0, 1000)
	for range 500 { // bounded: the reader takes the update
		if notified[0].Load() > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if notified[0].Load() == 0 {
		t.Fatal("the waiting stream was not notified of the connection's window")
	}
	pingAfter(t, c, n) // everything the update caused has happened
	for i := 1; i < len(notified); i++ {
		if got := notified[i].Load(); got != 0 {
			t.Errorf("stream %d, not waiting, notified %d times", i, got)
		}
	}
}

// TestPollReadBudget: a node that keeps its socket full gets pollReadBudget
// reads from one PollRead, which then asks to be called again (more), so
// that the poller's other tunnels are seen to in between.
func TestPollReadBudget(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	for buf.Len() < (pollReadBudget+4)*pollReadSize {
		fr.WriteRawFrame(0xfa, 0, 0, make([]byte, 16000)) // unknown: ignored
	}
	for wire := buf.Bytes(); len(wire) > 0; {
		n, err := unix.Write(fds[1], wire)
		if err != nil {
			t.Fatal(err)
		}
		wire = wire[n:]
	}
	c := &Conn{streams: map[uint32]*Stream{}, nextID: 1, cfg: Config{}.withDefaults()}
	c.fr = http2.NewFramer(nil, &c.src)
	c.fr.SetMaxReadFrameSize(defaultMaxFrameSize)
	c.pfd = fds[0]
	c.rb = make([]byte, 0, pollReadSize)
	ok, more := c.PollRead(fds[0], false)
	if !ok || !more {
		t.Fatalf("PollRead over a full socket = %v, %v; want true, true (budget spent, more to read)", ok, more)
	}
	for range 100 { // bounded: the rest takes a few calls
		if ok, more = c.PollRead(fds[0], false); !ok || !more {
			break
		}
	}
	if !ok || more {
		t.Fatalf("PollRead once the socket is drained = %v, %v; want true, false", ok, more)
	}
}
