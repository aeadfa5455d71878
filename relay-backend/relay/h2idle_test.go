package relay_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

// TestH2IdleMembersHoldNoGoroutine pins issue 21 item 5: a member reached
// over HTTP/2 costs no goroutine while idle. N members join over one
// connection and the relay's goroutines grow by the rooms' delivery
// goroutines only; after each member sent and got a message they are
// back to that; once the members leave they are back to where they were.
func TestH2IdleMembersHoldNoGoroutine(t *testing.T) {
	const n, perRoom = 60, 20
	s := startRelay(t, relay.Options{})
	hc := dialH2(t, s)
	waitFor(t, "the connection to settle", func() bool { return true })
	base := runtime.NumGoroutine()
	ms := make([]*websocket.Conn, n)
	for i := range ms {
		ms[i], _ = joinH2(t, hc, fmt.Sprintf("g%d", i/perRoom), true)
	}
	waitFor(t, "the members", func() bool { return s.Info().Connections == n })
	rooms := n / perRoom
	idle := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool { return runtime.NumGoroutine() <= base+rooms })
	}
	idle(fmt.Sprintf("at most %d+%d goroutines with %d idle members", base, rooms, n))
	for i := 0; i < n; i += perRoom {
		send(t, ms[i], websocket.TextMessage, []byte("to the room"))
		for _, c := range ms[i+1 : i+perRoom] {
			if _, b := read(t, c); string(b) != "to the room" {
				t.Fatalf("got %q", b)
			}
		}
	}
	idle("the readers and writers to end")
	for _, c := range ms {
		_ = c.Close()
	}
	waitIdle(t, s)
	waitFor(t, "the goroutines back", func() bool { return runtime.NumGoroutine() <= base })
}

// TestH2SlowConsumer is TestSlowConsumer over HTTP/2: a member whose
// client stopped giving window is closed with 1013 once SendQueue
// messages wait for it, and a member on the same connection gets every
// message meanwhile.
func TestH2SlowConsumer(t *testing.T) {
	s := startRelay(t, relay.Options{SendQueue: 4, WriteTimeout: 5 * time.Second})
	hc := dialH2(t, s)
	slow, _ := joinH2(t, hc, "flood", true)
	reader, _ := joinH2(t, hc, "flood", true)
	fast, _ := dial(t, s, "flood", true)
	h2client.StreamOf(slow).Freeze(true)
	payload := bytes.Repeat([]byte("x"), 16<<10)
	// Each message is read by the member beside the slow one before the
	// next goes: it never lags, the slow one only falls further behind.
	for i := 0; s.Info().SlowClosed == 0; i++ {
		if i == 10_000 {
			t.Fatal("no slow-consumer close after 10000 messages")
		}
		send(t, fast, websocket.BinaryMessage, payload)
		if _, b := read(t, reader); len(b) != len(payload) {
			t.Fatalf("the member beside the slow one got %d bytes", len(b))
		}
	}
	h2client.StreamOf(slow).Freeze(false)
	if code, text := closeCode(t, slow); code != websocket.CloseTryAgainLater || text != "slow consumer" {
		t.Fatalf("slow member closed with %d %q, want 1013 \"slow consumer\"", code, text)
	}
	if n := s.Info().SlowClosed; n != 1 {
		t.Fatalf("slow_closed = %d, want 1", n)
	}
	_ = fast.Close()
	_ = reader.Close()
	waitIdle(t, s)
}

// rawWrite writes b on c's connection (its stream over HTTP/2) as it is,
// in pieces of step bytes (all at once when step is 0).
func rawWrite(t *testing.T, c *websocket.Conn, b []byte, step int) {
	t.Helper()
	if step == 0 {
		step = len(b)
	}
	for len(b) > 0 {
		k := min(step, len(b))
		_ = c.NetConn().SetWriteDeadline(time.Now().Add(ioTimeout))
		if _, err := c.NetConn().Write(b[:k]); err != nil {
			t.Fatalf("raw write: %v", err)
		}
		b = b[k:]
	}
}

// maskedFrame encodes a client's frame.
func maskedFrame(fin bool, op wsframe.Opcode, payload []byte) []byte {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b := wsframe.AppendHeader(nil, wsframe.Header{Fin: fin, Op: op, Masked: true, Mask: key, Length: uint64(len(payload))})
	start := len(b)
	b = append(b, payload...)
	wsframe.Mask(key, 0, b[start:])
	return b
}

// TestH2FramesAsHTTP1 sends the same frames, well formed and not, to a
// member that came over HTTP/1.1 and to one that came over HTTP/2, and
// checks both are answered alike: the same close code, or the message
// relayed to a peer. The HTTP/2 member's frames are parsed by the relay
// itself, the HTTP/1.1 one's by fasthttp/websocket.
func TestH2FramesAsHTTP1(t *testing.T) {
	huge := binary.BigEndian.AppendUint64([]byte{0x82, 0xFF}, 1<<30)
	huge = append(huge, 1, 2, 3, 4) // the mask key; no payload follows
	rsv := maskedFrame(true, wsframe.OpText, []byte("hi"))
	rsv[0] |= 0x20
	opcode := maskedFrame(true, wsframe.OpText, []byte("hi"))
	opcode[0] = opcode[0]&^0xF | 0xB
	unmasked := append(wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpText, Length: 2}), "hi"...)
	for _, tc := range []struct {
		name  string
		frame []byte
		step  int
		code  int    // the close the sender gets; 0: none
		peer  string // what a peer gets; "": nothing
	}{
		{"byte by byte", maskedFrame(true, wsframe.OpText, []byte("one byte at a time")), 1, 0, "one byte at a time"},
		{"fragments and a ping byte by byte", bytes.Join([][]byte{
			maskedFrame(false, wsframe.OpBinary, []byte("frag")),
			maskedFrame(true, wsframe.OpPing, []byte("?")),
			maskedFrame(true, wsframe.OpContinuation, []byte("ments")),
		}, nil), 1, 0, "fragments"},
		{"1 GiB length", huge, 0, websocket.CloseMessageTooBig, ""},
		{"reserved bit", rsv, 0, websocket.CloseProtocolError, ""},
		{"reserved opcode", opcode, 0, websocket.CloseProtocolError, ""},
		{"unmasked", unmasked, 0, websocket.CloseProtocolError, ""},
		{"continuation first", maskedFrame(true, wsframe.OpContinuation, []byte("x")), 0, websocket.CloseProtocolError, ""},
		{"ping over 125 bytes", maskedFrame(true, wsframe.OpPing, make([]byte, 126)), 0, websocket.CloseProtocolError, ""},
		{"not UTF-8", maskedFrame(true, wsframe.OpText, []byte("bad \xff")), 0, websocket.CloseInvalidFramePayloadData, ""},
		{"close 1000", maskedFrame(true, wsframe.OpClose, []byte("\x03\xe8bye")), 0, websocket.CloseNormalClosure, ""},
		{"close without a code", maskedFrame(true, wsframe.OpClose, nil), 0, websocket.CloseNoStatusReceived, ""},
		{"close reason not UTF-8", maskedFrame(true, wsframe.OpClose, []byte("\x03\xe8bye \xff")), 0, websocket.CloseProtocolError, ""},
		{"close with a bad code", maskedFrame(true, wsframe.OpClose, []byte("\x03\xed")), 0, websocket.CloseProtocolError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRelay(t, relay.Options{MaxMessage: 1 << 20})
			hc := dialH2(t, s)
			for _, way := range []string{"HTTP/1.1", "HTTP/2"} {
				join := func() *websocket.Conn {
					if way == "HTTP/2" {
						c, _ := joinH2(t, hc, "f", true)
						return c
					}
					c, _ := dial(t, s, "f", true)
					return c
				}
				peer, sender := join(), join()
				rawWrite(t, sender, tc.frame, tc.step)
				if tc.code != 0 {
					if code, text := closeCode(t, sender); code != tc.code {
						t.Fatalf("%s: sender closed with %d %q, want %d", way, code, text, tc.code)
					}
					waitFor(t, way+": the sender to leave", func() bool { return s.Info().Connections == 1 })
				}
				if tc.peer != "" {
					if _, b := read(t, peer); string(b) != tc.peer {
						t.Fatalf("%s: peer got %q, want %q", way, b, tc.peer)
					}
				}
				// The peer gets nothing else: the next message is this.
				_ = sender.Close()
				last := join()
				send(t, last, websocket.TextMessage, []byte("last"))
				if _, b := read(t, peer); string(b) != "last" {
					t.Fatalf("%s: peer got %q, want \"last\"", way, b)
				}
				_ = peer.Close()
				_ = last.Close()
				waitIdle(t, s)
			}
		})
	}
}

// TestH2PingPong: a ping from a member over HTTP/2 is answered with a
// pong carrying its payload, between the messages the member gets. The
// pong and another member's message race to the stream (the ping is read
// by a reader of its own), so messages go on until the pong has come.
func TestH2PingPong(t *testing.T) {
	s := startRelay(t, relay.Options{})
	hc := dialH2(t, s)
	c, _ := joinH2(t, hc, "p", true)
	pongs := make(chan string, 1)
	c.SetPongHandler(func(data string) error { pongs <- data; return nil })
	if err := c.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	other, _ := dial(t, s, "p", true)
	for i := range 100 {
		msg := fmt.Sprint("after the ping ", i)
		send(t, other, websocket.TextMessage, []byte(msg))
		if _, b := read(t, c); string(b) != msg {
			t.Fatalf("got %q, want %q", b, msg)
		}
		select {
		case p := <-pongs:
			if p != "are you there" {
				t.Fatalf("pong %q", p)
			}
			return
		default:
		}
	}
	t.Fatal("no pong among 100 messages")
}

// TestH2KickUnanswered: a member over HTTP/2 that is closed (here by a
// drain) and never answers the close frame loses its stream after
// WriteTimeout, and the drain completes.
func TestH2KickUnanswered(t *testing.T) {
	s := startRelay(t, relay.Options{WriteTimeout: 300 * time.Millisecond, DrainWindow: time.Millisecond})
	hc := dialH2(t, s)
	c, _ := joinH2(t, hc, "k", false)
	waitFor(t, "the member", func() bool { return s.Info().Connections == 1 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		done <- s.Drain(ctx)
	}()
	// Read the stream raw, under the WebSocket, which would answer.
	st := h2client.StreamOf(c)
	_ = st.SetReadDeadline(time.Now().Add(ioTimeout))
	var got []byte
	buf := make([]byte, 512)
	for range 1000 {
		n, err := st.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	want := wsframe.AppendClose(nil, websocket.CloseGoingAway, "going away", nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("the stream carried %q, want only the close %q", got, want)
	}
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	waitIdle(t, s)
}

// TestH2StreamEndLeaves: a client that ends its side of the stream without
// a close frame, or whose connection drops, leaves its room as an HTTP/1.1
// client whose TCP connection closes does.
func TestH2StreamEndLeaves(t *testing.T) {
	s := startRelay(t, relay.Options{})
	hc := dialH2(t, s)
	a, _ := joinH2(t, hc, "e", true)
	joinH2(t, hc, "e", true)
	if err := h2client.StreamOf(a).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ended member to leave", func() bool { return s.Info().Connections == 1 })
	_ = hc.Close()
	waitIdle(t, s)
}

// TestH2PubSubInterrupted is TestPubSubInterrupted with its reader over
// HTTP/2: the repairs from the Stream hand it every offset exactly once,
// in order, through its queue and the stream's writes.
func TestH2PubSubInterrupted(t *testing.T) {
	r1, r2, admin := redisPair(t)
	writer := v1Dial(t, r1, "cut", relayclient.Since{})
	joinV1(t, writer)
	hc := dialH2(t, r2)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	reader, _, err := relayclient.Dial(ctx, hc.Dialer(ioTimeout), "ws://relay/room/cut", relayclient.Since{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Close() })
	joinV1(t, reader)

	const n = 400
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := writer.Send(relayclient.TypeText, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			if i%100 == 50 {
				if err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
					t.Errorf("CLIENT KILL: %v", err)
				}
			}
		}
	})
	for want := uint64(1); want <= n; want++ {
		f := next(t, reader) // Next fails on a duplicate or reordering
		if f.Kind != relayclient.KindMsg || f.Offset != want || string(f.Body) != fmt.Sprint(want-1) {
			t.Fatalf("got %s:%d %q, want MSG:%d", f.Kind, f.Offset, f.Body, want)
		}
	}
	wg.Wait()
	waitFor(t, "resubscribes and repairs counted", func() bool {
		i := r2.Info()
		return i.Resubscribes > 0 && i.Repairs > 0
	})
}

// TestH2KickCutsTheBatchInFlight: a member over HTTP/2 kicked as a slow
// consumer while its writer is writing a batch (the queue it took at
// once) gets its close after at most the chunk in hand, as a kicked
// HTTP/1.1 writer stops after the message in hand; it does not first get
// the whole batch, which a client trickling window would make last many
// times WriteTimeout while the member keeps its place in the room.
func TestH2KickCutsTheBatchInFlight(t *testing.T) {
	s := startRelay(t, relay.Options{SendQueue: 64, WriteTimeout: time.Second})
	hc := dialH2(t, s)
	slow, _ := joinH2(t, hc, "trickle", true)
	watch, _ := dial(t, s, "trickle", false)
	fast, _ := dial(t, s, "trickle", false)
	st := h2client.StreamOf(slow)
	st.Freeze(true)
	grant := func(n uint32) {
		_ = hc.WriteFrames(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(st.ID(), n) })
	}
	payload := bytes.Repeat([]byte("x"), 16<<10)
	sent := 0
	sendSeen := func(k int) { // send k messages, and see them reach the watcher
		for range k {
			send(t, fast, websocket.BinaryMessage, payload)
			sent++
			read(t, watch)
		}
	}
	// 4 fill the initial 64 KiB window, the 5th blocks the writer, 60
	// queue; a window for 4 more lets the writer take the 60 as a batch.
	sendSeen(5 + 60)
	grant(64 << 10)
	time.Sleep(50 * time.Millisecond)
	stop := make(chan struct{})
	trickling := make(chan struct{})
	go func() { // a client that reads, slowly: 32 KiB at a time
		defer close(trickling)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			grant(32 << 10)
		}
	}()
	for s.Info().SlowClosed == 0 {
		if sent > 1000 {
			t.Fatal("no slow-consumer close")
		}
		sendSeen(1)
	}
	got := 0
	for {
		_ = slow.SetReadDeadline(time.Now().Add(ioTimeout))
		_, _, err := slow.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseTryAgainLater) {
				t.Fatalf("after %d messages: %v, want close 1013", got, err)
			}
			break
		}
		got++
	}
	close(stop)
	<-trickling
	t.Logf("the kicked member got %d of the %d messages sent before its close", got, sent)
	if got >= 5+60 {
		t.Fatalf("the kicked member got %d messages before its close: the batch in flight went whole", got)
	}
	waitFor(t, "the kicked member to leave", func() bool { return s.Info().Connections == 2 })
}
