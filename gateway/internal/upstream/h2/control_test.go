package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/h2core"
	"golang.org/x/net/http2"
)

// settingsFrames returns SETTINGS frames that set INITIAL_WINDOW_SIZE to
// each of vals, in order.
func settingsFrames(tb testing.TB, vals ...uint32) []*http2.SettingsFrame {
	tb.Helper()
	var out []*http2.SettingsFrame
	for _, v := range vals {
		// A Framer's frame is valid until its next read: one each.
		var buf bytes.Buffer
		fr := http2.NewFramer(&buf, &buf)
		if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: v}); err != nil {
			tb.Fatal(err)
		}
		f, err := fr.ReadFrame()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, f.(*http2.SettingsFrame))
	}
	return out
}

// BenchmarkSettingsChange is the node's SETTINGS flood's cost to the
// reader: each frame toggles SETTINGS_INITIAL_WINDOW_SIZE on a
// connection with that many open streams.
func BenchmarkSettingsChange(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprint(n, "streams"), func(b *testing.B) {
			c := &Conn{streams: map[uint32]*Stream{}, peer: h2core.NewPeerSettings()}
			c.send.Init()
			c.setWindow = func(v uint32) bool { return c.send.SetPeerWindow(v, c.writers) }
			for i := range n {
				id := uint32(2*i + 1)
				c.streams[id] = &Stream{c: c, id: id}
			}
			fs := settingsFrames(b, 0, defaultWindow)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c.mu.Lock()
				err := c.applySettings(fs[i%2])
				c.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cutFor waits until c has ended and checks why: its error names want.
func cutFor(t *testing.T, c *Conn, want string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection was not cut (%+v)", c.Stats())
	}
	if err := c.Err(); !errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), want) {
		t.Fatalf("connection ended with %v, want %q", err, want)
	}
}

// discard reads and drops the frames n receives until its connection
// ends.
func (n *fakeNode) discard() {
	go func() {
		for {
			if _, err := n.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
}

// TestNodePingFloodCut pins a node's PING flood: the gateway queued one
// ACK per PING with no bound (1.72 GB of PINGs in 30 s took it to 4.68
// GB), and answered PINGs without end from a node that reads them. The
// node's connection is cut (ENHANCE_YOUR_CALM) past controlBurst, its
// stream's reader gets ErrConnLost (its client 1012), and a connection
// to another node goes on.
func TestNodePingFloodCut(t *testing.T) {
	for _, reads := range []bool{false, true} {
		t.Run(fmt.Sprint("node reads its answers: ", reads), func(t *testing.T) {
			bystander, bn, err := newFakeNode(t, Config{}, xconnect)
			if err != nil {
				t.Fatal(err)
			}
			c, n, err := newFakeNode(t, Config{WriteTimeout: time.Minute}, xconnect)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := n.openOK(c)
			if reads {
				n.discard()
			}
			for i := range 20 * controlBurst {
				if n.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)}) != nil {
					break // cut
				}
			}
			cutFor(t, c, "ENHANCE_YOUR_CALM")
			if _, err := st.Read(make([]byte, 1)); !errors.Is(err, ErrConnLost) {
				t.Errorf("the flooder's stream: %v, want ErrConnLost", err)
			}
			pingAfter(t, bystander, bn)
		})
	}
}

// TestNodeSettingsFloodCut pins a node's SETTINGS flood (item 18 of the
// attack: each SETTINGS_INITIAL_WINDOW_SIZE change walked and woke every
// stream, about a core): a node that toggles it without end, reading its
// ACKs, is cut past controlBurst.
func TestNodeSettingsFloodCut(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		n.openOK(c)
	}
	n.discard()
	for i := range 20 * controlBurst {
		if n.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(i % 2 * defaultWindow)}) != nil {
			break
		}
	}
	cutFor(t, c, "ENHANCE_YOUR_CALM")
}

// TestAnswersCountUntilWritten: answers to the node count against
// maxAnswerBytes until their write is done, not only until the flusher
// takes them from the queue (then a node that reads slowly could pin
// another maxAnswerBytes behind each write in progress).
func TestAnswersCountUntilWritten(t *testing.T) {
	c, n, err := newFakeNode(t, Config{WriteTimeout: time.Minute}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	c.nc.(*net.TCPConn).SetWriteBuffer(16 << 10)
	n.nc.(*net.TCPConn).SetReadBuffer(16 << 10)
	ack := func(fr *http2.Framer) error { return fr.WritePing(true, [8]byte{}) }
	const frame = 9 + 8
	// 60% of the bound, queued while the flusher waits for the queue's
	// lock, so that it takes them in one write, which blocks.
	c.qmu.Lock()
	for range maxAnswerBytes * 6 / 10 / frame {
		if err := c.q.AnswerLocked(ack); err != nil {
			c.qmu.Unlock()
			t.Fatalf("60%% of the bound: %v", err)
		}
	}
	c.qmu.Unlock()
	c.Kick()
	for i := 0; ; i++ {
		if taken := c.queued() == 0; taken {
			break
		}
		if i == 10000 {
			t.Fatal("the flusher never took the queue")
		}
		time.Sleep(time.Millisecond)
	}
	// 50% more: past the bound only if the 60% in the write count.
	var cut error
	for range maxAnswerBytes / 2 / frame {
		if cut = c.answer(ack); cut != nil {
			break
		}
	}
	if !strings.Contains(fmt.Sprint(cut), "ENHANCE_YOUR_CALM") {
		t.Fatalf("past the bound with half of it in a write: %v, want the connection cut", cut)
	}
	c.fail(cut)
	if _, err := c.Ping(context.Background()); !errors.Is(err, ErrConnLost) {
		t.Errorf("ping after the cut: %v", err)
	}
}

// TestInitialWindowOverflow: a SETTINGS_INITIAL_WINDOW_SIZE that takes
// a stream's window past 2^31-1 is a connection error (RFC 9113 section
// 6.9.2), found although the change is applied without a pass over the
// streams; one that does not, after the stream that had the most window
// sent some, is not.
func TestInitialWindowOverflow(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n.fr.WriteWindowUpdate(0, 1<<20)
	s, hf := n.openOK(c)
	n.fr.WriteWindowUpdate(hf.StreamID, maxWindow-(2<<20)) // the window: 2^31-1 - 1 MiB
	if _, err := s.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	n.nextData()
	// Stream window now 2^31-1 - 1 MiB - 1000: 1 MiB + 1000 more fits.
	n.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 2<<20 + 1000})
	pingAfter(t, c, n)
	n.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 2<<20 + 1001})
	ga := n.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeFlowControl {
		t.Errorf("GOAWAY %v, want FLOW_CONTROL_ERROR", ga.ErrCode)
	}
	<-c.Done()
}

// slowReader is a node's socket read slowly but steadily: chunk bytes,
// then a pause.
type slowReader struct {
	r     io.Reader
	chunk int
	pause time.Duration
	left  int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		time.Sleep(s.pause)
		s.left = s.chunk
	}
	n, err := s.r.Read(p[:min(len(p), s.left)])
	s.left -= n
	return n, err
}

// backlogNode connects to a fake node that gives 8 MiB of window, queues
// a backlog of size bytes of DATA on one stream in one go (as a poller's
// WriteNB does for many tunnels), and then reads the connection slowly
// but steadily (32 KiB every 20 ms), answering PINGs; acked is closed
// once it has read the whole backlog.
func backlogNode(t *testing.T, cfg Config, size int) (c *Conn, acked chan struct{}) {
	t.Helper()
	c, n, err := newFakeNode(t, cfg, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n.fr.WriteWindowUpdate(0, 8<<20)
	s, _ := n.openOK(c)
	c.nc.(*net.TCPConn).SetWriteBuffer(16 << 10)
	n.nc.(*net.TCPConn).SetReadBuffer(16 << 10)
	n.nc.SetDeadline(time.Time{})
	for i := 0; ; i++ { // the node's WINDOW_UPDATE is in
		c.mu.Lock()
		in := c.send.Window() >= 8<<20
		c.mu.Unlock()
		if in {
			break
		}
		if i == 10000 {
			t.Fatal("the node's window never came")
		}
		time.Sleep(time.Millisecond)
	}
	if k, err := s.WriteNB([][]byte{make([]byte, size)}); k != size || err != nil {
		t.Fatalf("WriteNB: %d %v", k, err)
	}
	acked = make(chan struct{})
	slow := http2.NewFramer(n.nc, &slowReader{r: n.nc, chunk: 32 << 10, pause: 20 * time.Millisecond})
	go func() {
		got := 0
		for {
			f, err := slow.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				if got += len(f.Data()); got == size {
					close(acked)
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					n.fr.WritePing(true, f.Data)
				}
			}
		}
	}()
	return c, acked
}

// TestSlowSteadyNodeKeepsItsConnection pins the one write deadline for
// a whole queue: 2 MiB queued at once, to a node that takes 32 KiB every
// 20 ms, took longer than the write timeout (300 ms here), and the node's
// connection was lost, and every stream on it, though the node never
// stopped reading. Each 64 KiB gets its own deadline now.
func TestSlowSteadyNodeKeepsItsConnection(t *testing.T) {
	c, acked := backlogNode(t, Config{WriteTimeout: 300 * time.Millisecond}, 2<<20)
	c.Kick()
	select {
	case <-acked:
	case <-c.Done():
		t.Fatalf("the connection was lost under a slow but steady node: %v", c.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("the backlog never arrived")
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestPingBehindBacklog pins the PING timed from its call: queued behind
// 2 MiB of DATA that a slow but steady node drains in over a second, a
// PING given 200 ms failed, which ends the connection in Set's
// keepalive. The time is counted from the PING's departure now.
func TestPingBehindBacklog(t *testing.T) {
	c, acked := backlogNode(t, Config{WriteTimeout: 10 * time.Second}, 2<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("a PING behind a backlog that drains: %v", err)
	}
	select {
	case <-acked:
	default:
		t.Fatal("the PING's answer came before the backlog ahead of it was read")
	}
}

// TestWindowWaitersWokenOneByOne pins the cost of a node's connection
// WINDOW_UPDATE: it woke every stream waiting for the connection's window,
// per frame, and the last waiter to leave woke every stream of the
// connection. One waiting stream is woken now, which passes on what it
// leaves; the wakeups are counted, not timed.
func TestWindowWaitersWokenOneByOne(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big, _ := n.openOK(c)
	if _, err := big.Write(make([]byte, defaultWindow)); err != nil {
		t.Fatal(err)
	}
	for got := 0; got < defaultWindow; {
		got += len(n.nextData().Data())
	}
	// Idle streams, which no connection WINDOW_UPDATE concerns.
	for range 100 {
		n.openOK(c)
	}
	const waiters = 50
	done := make(chan error, waiters)
	for range waiters {
		s, _ := n.openOK(c)
		go func() {
			s.SetWriteDeadline(time.Now().Add(20 * time.Second))
			_, err := s.Write(make([]byte, 10))
			done <- err
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.mu.Lock()
		w := c.send.ConnWaiters()
		c.mu.Unlock()
		if w == waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams wait for the connection's window", w, waiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	before := c.writerWakes
	c.mu.Unlock()
	for range 100 {
		if err := n.fr.WriteWindowUpdate(0, 1); err != nil {
			t.Fatal(err)
		}
	}
	// The 100 bytes go out.
	for got := 0; got < 100; {
		got += len(n.nextData().Data())
	}
	c.mu.Lock()
	wakes := c.writerWakes - before
	c.mu.Unlock()
	if wakes > 200 {
		t.Fatalf("100 one-byte connection window updates woke writers %d times, with %d streams waiting and 100 idle", wakes, waiters)
	}
	// The rest: every stream writes its 10 bytes.
	if err := n.fr.WriteWindowUpdate(0, 1000); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := n.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	for range waiters {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestNodeContinuationFloodCut pins a node's CONTINUATION flood: a
// response header block of fragments that decode to nothing (hpack
// table size updates) was read for as long as the node sent it by a
// connection its own goroutine reads (only a poller bounded the block).
// Either reader now cuts it (ENHANCE_YOUR_CALM): the goroutine's by
// h2core.ReadBudget, the poller's by maxHeaderGroup.
func TestNodeContinuationFloodCut(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	res := openAsync(c, &Request{Authority: "n", Path: "/"})
	hf := n.nextHeaders()
	n.discard()
	frag := bytes.Repeat([]byte{0x20}, defaultMaxFrameSize) // table size update to 0
	go func() {
		if n.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: hf.StreamID, BlockFragment: frag}) != nil {
			return
		}
		for range 1000 { // 16 MiB at most, never END_HEADERS
			if n.fr.WriteContinuation(hf.StreamID, false, frag) != nil {
				return
			}
		}
	}()
	cutFor(t, c, "ENHANCE_YOUR_CALM")
	if r := <-res; r.err == nil {
		t.Fatal("the stream opened on a flood")
	}
}
