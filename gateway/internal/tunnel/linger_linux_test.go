package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
	"golang.org/x/sys/unix"
)

// TestCutClientReadsItsClose pins that a client the gateway stops reading
// (a frame over max_frame, with more bytes behind it the gateway never
// reads) still gets everything the node sent it and then its 1009, though
// it reads slowly: the gateway's close frame sits behind a full send
// buffer when the tunnel ends. Closing the socket then, with the client's
// bytes unread, would send a reset that throws the queue away; the client
// would read a part of the node's frames and then "connection reset".
func TestCutClientReadsItsClose(t *testing.T) {
	r := newRig(t, 1024)
	sock := r.client
	if tc, ok := sock.(interface{ NetConn() net.Conn }); ok {
		sock = tc.NetConn() // the TLS run's
	}
	_ = setSockBuf(sock, unix.SO_RCVBUF, 32<<10)

	// The node fills the way to the client, which reads slowly, then
	// answers the gateway's 1001 (the client is gone) with its close.
	const frames, size = 64, 4 << 10
	nodeDone := make(chan error, 1)
	go func() {
		_ = r.node.SetDeadline(time.Now().Add(20 * time.Second))
		for i := range frames {
			p := bytes.Repeat([]byte{byte('a' + i%26)}, size)
			if _, err := r.node.Write(frame(wsframe.OpBinary, true, false, p)); err != nil {
				nodeDone <- err
				return
			}
		}
		if _, err := r.nr.ReadByte(); err != nil {
			nodeDone <- err
			return
		}
		_, err := r.node.Write(wsframe.AppendClose(nil, CodeGoingAway, "", nil))
		nodeDone <- err
	}()

	// The client sends a frame over the limit, and goes on sending while
	// it reads: when the tunnel ends, bytes of the client's are unread or
	// on their way.
	r.write(r.client, frame(wsframe.OpBinary, true, true, make([]byte, 2048)))
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		_ = sock.SetWriteDeadline(time.Now().Add(20 * time.Second))
		chunk := make([]byte, 256)
		for range 20000 {
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
			if _, err := r.client.Write(chunk); err != nil {
				sent <- err
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
		sent <- nil
	}()

	// The client's 1009 takes the place of the node's close, behind the
	// node's frames.
	for i := range frames {
		h, p := readFrame(t, r.client, r.cr)
		if h.Op != wsframe.OpBinary || len(p) != size || p[0] != byte('a'+i%26) {
			t.Fatalf("frame %d: %v of %d bytes", i, h.Op, len(p))
		}
		if i%8 == 0 {
			time.Sleep(5 * time.Millisecond) // a slow reader
		}
	}
	expectClose(t, r.client, r.cr, CodeTooBig, false)
	close(stop)
	if err := <-sent; err != nil {
		t.Fatalf("the client's writes after the cut: %v", err)
	}
	if err := <-nodeDone; err != nil {
		t.Fatalf("node: %v", err)
	}
	// Then the end of the stream, not a reset.
	_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := r.cr.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after the close: %d bytes, %v; want EOF", n, err)
	}
	r.client.Close()
	r.waitEnd()
}

// TestLingerCountedAndBounded pins the linger's limit: past lingerMax
// sockets lingering at once, a cut client's socket is closed at once, and
// every lingering socket is counted until it is closed.
func TestLingerCountedAndBounded(t *testing.T) {
	waitLingering(t, 0) // the sockets of earlier tests
	base := lingering.Load()
	old := lingerMax.Load()
	lingerMax.Store(base + 1)
	defer lingerMax.Store(old)

	// The first cut client lingers: it never reads nor closes.
	a := newRig(t, 1024)
	a.write(a.client, frame(wsframe.OpBinary, true, true, make([]byte, 2048)))
	expectClose(t, a.node, a.nr, CodeGoingAway, true)
	a.write(a.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	a.waitEnd()
	if n := lingering.Load() - base; n != 1 {
		t.Fatalf("lingering %d, want 1", n)
	}
	// The second finds the place taken and is closed at once.
	b := newRig(t, 1024)
	b.write(b.client, frame(wsframe.OpBinary, true, true, make([]byte, 2048)))
	expectClose(t, b.node, b.nr, CodeGoingAway, true)
	b.write(b.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	b.waitEnd()
	expectClose(t, b.client, b.cr, CodeTooBig, false)
	if n := lingering.Load() - base; n != 1 {
		t.Fatalf("lingering %d, want 1", n)
	}
	// The first client reads its close and closes: its socket goes.
	expectClose(t, a.client, a.cr, CodeTooBig, false)
	a.client.Close()
	waitLingering(t, base)
	var nerr net.Error
	_ = b.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := b.cr.Read(make([]byte, 1)); err == nil || (errors.As(err, &nerr) && nerr.Timeout()) {
		t.Fatalf("the second client's socket: %v, want it closed", err)
	}
}

// TestQueuedCloseOutlivesTheEnd pins that the tunnel's connections close
// only after what is queued for a slow client has gone: the node's last
// frames and the close behind them, waiting in the poller's tail when the
// close handshake ends, reach the client whole, in a close begun by a cut
// client (its 1009) or by the client itself (the node's 1000 answer).
func TestQueuedCloseOutlivesTheEnd(t *testing.T) {
	for _, cut := range []bool{true, false} {
		name := "handshake"
		if cut {
			name = "cut"
		}
		t.Run(name, func(t *testing.T) {
			client, gwClient := clientPair(t)
			gwNode, node := nodePair(t)
			sock := client
			if tc, ok := sock.(interface{ NetConn() net.Conn }); ok {
				sock = tc.NetConn()
			}
			_ = setSockBuf(sock, unix.SO_RCVBUF, 4096)
			if gs := socketOf(gwClient); gs != nil {
				_ = gs.SetWriteBuffer(4096)
			}
			lease := &countingLease{}
			tun := New(Params{Client: gwClient, Node: gwNode, MaxFrame: 1024, CloseTimeout: 10 * time.Second, Lease: lease})
			tun.Start()
			cr, nr := bufio.NewReader(client), bufio.NewReader(node)
			want := uint16(CodeTooBig)
			if cut {
				r := &rig{t: t, client: client}
				r.write(client, frame(wsframe.OpBinary, true, true, make([]byte, 2048)))
				expectClose(t, node, nr, CodeGoingAway, true)
			} else {
				want = 1000
				if _, err := client.Write(wsframe.AppendClose(nil, 1000, "", &testMask)); err != nil {
					t.Fatal(err)
				}
				expectClose(t, node, nr, 1000, true)
			}
			// The node sends its frames and its close in one write; the
			// client reads none of it for a while.
			const frames, size = 16, 4 << 10
			var all []byte
			for i := range frames {
				all = append(all, frame(wsframe.OpBinary, true, false, bytes.Repeat([]byte{byte('a' + i%26)}, size))...)
			}
			all = append(all, wsframe.AppendClose(nil, want, "", nil)...)
			wrote := make(chan error, 1)
			go func() {
				_ = node.SetWriteDeadline(time.Now().Add(20 * time.Second))
				_, err := node.Write(all)
				wrote <- err
			}()
			time.Sleep(200 * time.Millisecond)
			for i := range frames {
				h, p := readFrame(t, client, cr)
				if h.Op != wsframe.OpBinary || len(p) != size || p[0] != byte('a'+i%26) {
					t.Fatalf("frame %d: %v of %d bytes", i, h.Op, len(p))
				}
			}
			expectClose(t, client, cr, want, false)
			if err := <-wrote; err != nil {
				t.Fatalf("node write: %v", err)
			}
			client.Close()
			select {
			case <-tun.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("tunnel did not end")
			}
		})
	}
}

// stallConn is a client connection whose writes wait, as on a zero
// window, until Close, once stalled is set.
type stallConn struct {
	net.Conn
	stalled atomic.Bool
	closed  chan struct{}
	once    sync.Once
}

func (c *stallConn) Write(b []byte) (int, error) {
	if !c.stalled.Load() {
		return c.Conn.Write(b)
	}
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	case <-time.After(time.Minute):
		return 0, os.ErrDeadlineExceeded
	}
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestAbortCutsAClosingCutClient pins that Abort ends a tunnel whose cut
// client is being written its close and takes nothing (the node vanished
// first): the write is cut by the close of the client's connection, and
// nothing lingers.
func TestAbortCutsAClosingCutClient(t *testing.T) {
	client, gwRaw := tcpPair(t)
	gwClient := &stallConn{Conn: gwRaw, closed: make(chan struct{})}
	gwNode, node := tcpPair(t)
	base := lingering.Load()
	tun := New(Params{Client: gwClient, Node: gwNode, MaxFrame: 1024, CloseTimeout: time.Hour, WriteTimeout: time.Hour})
	tun.Start()
	nr := bufio.NewReader(node)
	if _, err := client.Write(frame(wsframe.OpBinary, true, true, make([]byte, 2048))); err != nil {
		t.Fatal(err)
	}
	expectClose(t, node, nr, CodeGoingAway, true)
	gwClient.stalled.Store(true)
	node.Close() // the 1009 is written, and waits
	for i := 0; tun.EndReason() != EndNodeGone; i++ {
		if i == 1000 {
			t.Fatalf("reason %v", tun.EndReason())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tun.Abort()
	select {
	case <-tun.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("Abort did not end the tunnel (reason %v)", tun.EndReason())
	}
	waitLingering(t, base)
}

// waitLingering waits until n sockets linger.
func waitLingering(t *testing.T, n int32) {
	t.Helper()
	for i := 0; lingering.Load() != n; i++ {
		if i == 2000 {
			t.Fatalf("%d sockets lingering, want %d", lingering.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLingerEndsAfterLingerBytes pins the linger's byte bound: a cut
// client that goes on sending, and neither closes nor reaches a close
// deadline an hour away, has its socket closed once lingerBytes came.
func TestLingerEndsAfterLingerBytes(t *testing.T) {
	waitLingering(t, 0) // the sockets of earlier tests
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	tun := New(Params{Client: gwClient, Node: gwNode, MaxFrame: 1024, CloseTimeout: time.Hour})
	tun.Start()
	cr, nr := bufio.NewReader(client), bufio.NewReader(node)
	if _, err := client.Write(frame(wsframe.OpBinary, true, true, make([]byte, 2048))); err != nil {
		t.Fatal(err)
	}
	expectClose(t, node, nr, CodeGoingAway, true)
	if _, err := node.Write(wsframe.AppendClose(nil, CodeGoingAway, "", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tun.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("tunnel did not end")
	}
	expectClose(t, client, cr, CodeTooBig, false)
	if n := lingering.Load(); n != 1 {
		t.Fatalf("lingering %d, want 1", n)
	}
	// Twice the bound, in pieces; writes fail once the socket is gone.
	_ = client.SetWriteDeadline(time.Now().Add(20 * time.Second))
	chunk := make([]byte, 4096)
	for range 2 * lingerBytes / len(chunk) {
		if _, err := client.Write(chunk); err != nil {
			break
		}
	}
	waitLingering(t, 0)
}
