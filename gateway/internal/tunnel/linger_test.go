package tunnel

import (
	"bytes"
	"errors"
	"io"
	"net"
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

// TestLingerCountedAndBounded pins the linger's limit: past
// lingerMax sockets lingering at once, a cut client's socket is closed
// at once, and every lingering socket is counted until it is closed.
func TestLingerCountedAndBounded(t *testing.T) {
	old := lingerMax
	lingerMax = 1
	defer func() { lingerMax = old }()

	// The first cut client lingers: it never reads nor closes.
	a := newRig(t, 1024)
	a.write(a.client, frame(wsframe.OpBinary, true, true, make([]byte, 2048)))
	expectClose(t, a.node, a.nr, CodeGoingAway, true)
	a.write(a.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	a.waitEnd()
	if n := lingering.Load(); n != 1 {
		t.Fatalf("lingering %d, want 1", n)
	}
	// The second finds the place taken and is closed at once.
	b := newRig(t, 1024)
	b.write(b.client, frame(wsframe.OpBinary, true, true, make([]byte, 2048)))
	expectClose(t, b.node, b.nr, CodeGoingAway, true)
	b.write(b.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	b.waitEnd()
	expectClose(t, b.client, b.cr, CodeTooBig, false)
	if n := lingering.Load(); n != 1 {
		t.Fatalf("lingering %d, want 1", n)
	}
	// The first client reads its close and closes: its socket goes.
	expectClose(t, a.client, a.cr, CodeTooBig, false)
	a.client.Close()
	for i := 0; lingering.Load() != 0; i++ {
		if i == 1000 {
			t.Fatalf("still lingering: %d", lingering.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var nerr net.Error
	_ = b.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := b.cr.Read(make([]byte, 1)); err == nil || (errors.As(err, &nerr) && nerr.Timeout()) {
		t.Fatalf("the second client's socket: %v, want it closed", err)
	}
}
