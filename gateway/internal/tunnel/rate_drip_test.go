package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
	"golang.org/x/sys/unix"
)

// TestRateLimitDripGives1008 pins issue 19 item 11: a client sending its
// frames one byte per TCP segment (TCP_NODELAY, one write per byte, a
// pause between) stayed under frame_rate and byte_rate, which counted only
// whole frames and bytes, while every byte cost the gateway a read. A read
// that ends no frame and brings fewer than smallRead bytes now costs
// smallRead bytes and one frame: the drip gets 1008, and a client sending
// the same bytes as whole frames does not.
func TestRateLimitDripGives1008(t *testing.T) {
	// 600 bytes: six frames of 100 bytes (a 94-byte payload).
	one := frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{'d'}, 94))
	for _, c := range []struct {
		name string
		p    Params
	}{
		// Both rates hold the 600 bytes (or six frames) with room to
		// spare, sent at once or over seconds.
		{"bytes", Params{ByteRate: 1000}},
		{"frames", Params{FrameRate: 20}},
	} {
		t.Run(c.name+"/drip", func(t *testing.T) {
			r := newRigWith(t, c.p)
			for range 6 {
				for i := range one {
					if _, err := r.client.Write(one[i : i+1]); err != nil {
						t.Fatalf("drip write: %v", err)
					}
					time.Sleep(3 * time.Millisecond)
				}
			}
			// Cut at a frame's end, the node gets close 1001 and answers
			// it; cut inside a frame (most likely), it gets the part
			// the client sent, then the end of its stream, and closes.
			_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
			frames := 0
			for {
				h, _, err := readFrameErr(r.nr)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					r.node.Close()
					break
				}
				if err != nil {
					t.Fatalf("the drip was not cut: the node read %d frames, then %v (stats %+v)", frames, err, r.tun.Stats())
				}
				if h.Op == wsframe.OpClose {
					r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
					break
				}
				frames++
			}
			expectClose(t, r.client, r.cr, CodePolicy, false)
			r.waitEnd()
		})
		t.Run(c.name+"/frames", func(t *testing.T) {
			r := newRigWith(t, c.p)
			for i := range 6 {
				r.write(r.client, one)
				if h, p := readFrame(t, r.node, r.nr); h.Op != wsframe.OpBinary || len(p) != 94 {
					t.Fatalf("frame %d: node got %v of %d bytes", i, h.Op, len(p))
				}
				time.Sleep(50 * time.Millisecond)
			}
			r.closeNormally()
		})
	}
}

// TestRateLimitSmallReads is the charge of one read: a read that ends no
// frame costs at least smallRead bytes and one frame; one that ends a frame
// costs what it brought.
func TestRateLimitSmallReads(t *testing.T) {
	for _, c := range []struct {
		frames       uint64
		n            int
		wantF, wantB float64 // tokens spent
	}{
		{0, 1, 1, smallRead},                 // a dripped byte
		{0, smallRead - 1, 1, smallRead},     // a header sent apart from its payload
		{0, smallRead, 0, smallRead},         // a segment of a large frame
		{0, 1448, 0, 1448},                   // another
		{1, 6, 1, 6},                         // a whole empty frame
		{3, 30, 3, 30},                       // three small whole frames
		{1, smallRead - 1, 1, smallRead - 1}, // the end of a frame
	} {
		r := newClientRate(1000, 10000)
		r.last = 0
		r.read(c.frames, c.n, 0)
		if gotF, gotB := 1000-r.frames, 10000-r.bytes; gotF != c.wantF || gotB != c.wantB {
			t.Errorf("read(%d frames, %d bytes) cost %v frames and %v bytes, want %v and %v", c.frames, c.n, gotF, gotB, c.wantF, c.wantB)
		}
	}
}

// TestRateLimitInsideFrameEndsNodeStream: a client over its byte rate in
// the middle of a frame's payload (a drip always is) leaves the node inside
// that frame, where no close frame can go. The gateway's close 1001 used to
// be written there anyway, read by the node as payload, and the node then
// waited for the rest of the frame until the close timeout (found with
// issue 19 item 11). The node now gets exactly what the client sent and
// then the end of its stream; once it closes, the client gets 1008.
func TestRateLimitInsideFrameEndsNodeStream(t *testing.T) {
	r := newRigWith(t, Params{ByteRate: 1000})
	f := frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{'x'}, 2000))
	sent := f[:1100] // over the 1000 bytes of burst, inside the payload
	r.write(r.client, sent[:500])
	time.Sleep(50 * time.Millisecond)
	r.write(r.client, sent[500:])
	_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(r.node)
	if err != nil {
		t.Fatalf("node read %d bytes, then %v, not the end of its stream (stats %+v)", len(got), err, r.tun.Stats())
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("node read %d bytes (% x...), want the %d the client sent", len(got), got[:min(len(got), 8)], len(sent))
	}
	r.node.Close()
	expectClose(t, r.client, r.cr, CodePolicy, false)
	r.waitEnd()
}

// TestRateLimitInsideFrameKeepsQueuedFrames: a client cut over its rate
// inside a frame while the node is slow to read still has every byte
// forwarded before the cut delivered, then the end of the node's stream.
// On the event-driven engine the stream used to be shut for writing at
// once, with the bytes the node had not taken yet still queued (the tail):
// they were lost, whole frames among them, where the goroutine engine,
// whose writes are synchronous, delivered them (found in review of issue
// 19 item 11).
func TestRateLimitInsideFrameKeepsQueuedFrames(t *testing.T) {
	client, gwClient := clientPair(t)
	gwNode, node := smallBufPair(t)
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr = bufio.NewReader(client)
	// The first read (bufSize, over TCP) goes over the byte rate; the
	// node's small buffers take only part of it, and the rest waits in the
	// gateway's queue when the cut comes.
	// A close timeout past the node's read deadline: the node's stream
	// must end by the shutdown, not by the tunnel's close.
	r.tun = New(Params{Client: gwClient, Node: gwNode, Lease: r.lease, CloseTimeout: time.Minute, ByteRate: 3000})
	r.tun.Start()
	var sent []byte
	for range 8 {
		sent = append(sent, frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{'q'}, 3000))...)
	}
	r.write(r.client, sent)
	// Over TLS the reads are records, about 1.2 KB at first: the cut
	// comes at the first read past 3,000 bytes.
	waitFor(t, func() bool { return r.tun.Stats().BytesToNode > 3000 })
	_ = node.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(node)
	if err != nil {
		t.Fatalf("node read %d bytes, then %v, not the end of its stream", len(got), err)
	}
	if len(got) <= 3000 || !bytes.Equal(got, sent[:len(got)]) {
		t.Fatalf("node read %d bytes, want all the gateway read up to the cut (past 3,000), as the client sent them", len(got))
	}
	t.Logf("node read %d bytes, then the end of its stream", len(got))
	node.Close()
	expectClose(t, r.client, r.cr, CodePolicy, false)
	r.waitEnd()
}

// smallBufPair is tcpPair with the smallest buffers Linux allows between
// its ends, set before the connection is made (a window once advertised
// does not shrink): the first end's send buffer, the second's receive
// buffer.
func smallBufPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	small := func(opt int) func(string, string, syscall.RawConn) error {
		return func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, 1) }); err != nil {
				return err
			}
			return serr
		}
	}
	lc := net.ListenConfig{Control: small(unix.SO_RCVBUF)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: small(unix.SO_SNDBUF)}
	a, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
