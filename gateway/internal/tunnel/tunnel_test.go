package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// tcpPair returns both ends of one loopback TCP connection.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// countingLease counts Release calls.
type countingLease struct{ n atomic.Int32 }

func (l *countingLease) Release() { l.n.Add(1) }

// rig is a tunnel between a test client and a test node, each a plain TCP
// end the test reads and writes frames on.
type rig struct {
	t      *testing.T
	tun    *Tunnel
	client net.Conn // the test's client end
	node   net.Conn // the test's node end
	cr, nr *bufio.Reader
	lease  *countingLease
}

func newRig(t *testing.T, maxFrame uint64) *rig {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
	r.tun = New(Params{
		Client:       gwClient,
		Node:         gwNode,
		MaxFrame:     maxFrame,
		CloseTimeout: 10 * time.Second,
		Lease:        r.lease,
	})
	r.tun.Start()
	return r
}

var testMask = [4]byte{1, 2, 3, 4}

// frame builds one frame; masked frames carry testMask.
func frame(op wsframe.Opcode, fin, masked bool, payload []byte) []byte {
	h := wsframe.Header{Fin: fin, Op: op, Masked: masked, Length: uint64(len(payload))}
	if masked {
		h.Mask = testMask
	}
	b := wsframe.AppendHeader(nil, h)
	start := len(b)
	b = append(b, payload...)
	if masked {
		wsframe.Mask(h.Mask, 0, b[start:])
	}
	return b
}

// readFrame reads one whole frame and returns its header and unmasked
// payload.
func readFrame(t *testing.T, c net.Conn, r *bufio.Reader) (wsframe.Header, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hb []byte
	for {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("read header: %v (have % x)", err, hb)
		}
		hb = append(hb, b)
		h, n, err := wsframe.ParseHeader(hb)
		if errors.Is(err, wsframe.ErrShortHeader) {
			continue
		}
		if err != nil {
			t.Fatalf("bad header % x: %v", hb, err)
		}
		_ = n
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatalf("read payload: %v", err)
		}
		if h.Masked {
			wsframe.Mask(h.Mask, 0, p)
		}
		return h, p
	}
}

func expectClose(t *testing.T, c net.Conn, r *bufio.Reader, wantCode uint16, wantMasked bool) {
	t.Helper()
	h, p := readFrame(t, c, r)
	if h.Op != wsframe.OpClose {
		t.Fatalf("got %v frame %q, want close %d", h.Op, p, wantCode)
	}
	if h.Masked != wantMasked {
		t.Fatalf("close masked = %v, want %v", h.Masked, wantMasked)
	}
	code, _, err := wsframe.ParseClosePayload(p)
	if err != nil || code != wantCode {
		t.Fatalf("close code %d (%v), want %d", code, err, wantCode)
	}
}

func (r *rig) write(c net.Conn, b []byte) {
	r.t.Helper()
	if _, err := c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// waitEnd waits for the tunnel to end and checks the lease went back once.
func (r *rig) waitEnd() {
	r.t.Helper()
	select {
	case <-r.tun.Done():
	case <-time.After(20 * time.Second):
		r.t.Fatal("tunnel did not end")
	}
	if n := r.lease.n.Load(); n != 1 {
		r.t.Fatalf("lease released %d times, want 1", n)
	}
}

func TestPassThroughAndCloseHandshake(t *testing.T) {
	r := newRig(t, 0)
	msgs := [][]byte{[]byte("hello"), bytes.Repeat([]byte("x"), 300), bytes.Repeat([]byte("y"), 70000)}
	for _, m := range msgs {
		r.write(r.client, frame(wsframe.OpBinary, true, true, m))
		h, p := readFrame(t, r.node, r.nr)
		if !h.Masked || !bytes.Equal(p, m) {
			t.Fatalf("node got masked=%v %d bytes, want masked %d", h.Masked, len(p), len(m))
		}
		r.write(r.node, frame(wsframe.OpText, true, false, m))
		h, p = readFrame(t, r.client, r.cr)
		if h.Masked || !bytes.Equal(p, m) {
			t.Fatalf("client got masked=%v %d bytes, want unmasked %d", h.Masked, len(p), len(m))
		}
	}
	// Client-initiated close passes through both ways.
	r.write(r.client, wsframe.AppendClose(nil, 1000, "bye", &testMask))
	expectClose(t, r.node, r.nr, 1000, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "bye", nil))
	expectClose(t, r.client, r.cr, 1000, false)
	r.waitEnd()
	st := r.tun.Stats()
	if st.FramesToNode != 4 || st.FramesToClient != 4 || st.ClientCloseCode != 1000 || st.NodeCloseCode != 1000 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGoAwayLosesNoClientWrite pins the drain order: the client is told
// first, what it sends before its close reply still reaches the node, the
// node's later frames are dropped, and the client's close reply ends the
// node's side.
func TestGoAwayLosesNoClientWrite(t *testing.T) {
	r := newRig(t, 0)
	r.tun.GoAway(CodeGoingAway, "drain")
	expectClose(t, r.client, r.cr, CodeGoingAway, false)
	r.write(r.node, frame(wsframe.OpText, true, false, []byte("dropped")))
	r.write(r.client, frame(wsframe.OpText, true, true, []byte("late write")))
	if h, p := readFrame(t, r.node, r.nr); h.Op != wsframe.OpText || string(p) != "late write" {
		t.Fatalf("node got %v %q, want the client's late write", h.Op, p)
	}
	r.write(r.client, wsframe.AppendClose(nil, CodeGoingAway, "", &testMask))
	expectClose(t, r.node, r.nr, CodeGoingAway, true)
	r.write(r.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	r.waitEnd()
}

// TestGoAwaySilentClientCut pins the timeout: a client that never answers
// the close is cut, and the node gets the gateway's own close 1001.
func TestGoAwaySilentClientCut(t *testing.T) {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	lease := &countingLease{}
	tun := New(Params{Client: gwClient, Node: gwNode, Lease: lease, CloseTimeout: 200 * time.Millisecond})
	tun.Start()
	tun.GoAway(CodeGoingAway, "drain")
	expectClose(t, client, bufio.NewReader(client), CodeGoingAway, false)
	expectClose(t, node, bufio.NewReader(node), CodeGoingAway, true)
	<-tun.Done()
	if lease.n.Load() != 1 {
		t.Fatal("lease not released once")
	}
}

// TestGoAwayWaitsForFrameEnd pins that an injected close never splits a
// frame: the close goes out after the frame in flight is complete.
func TestGoAwayWaitsForFrameEnd(t *testing.T) {
	r := newRig(t, 0)
	payload := bytes.Repeat([]byte("z"), 1000)
	f := frame(wsframe.OpBinary, true, false, payload)
	r.write(r.node, f[:500])
	// Wait until the tunnel has forwarded the first part.
	got := make([]byte, 500)
	_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(r.cr, got); err != nil {
		t.Fatal(err)
	}
	r.tun.GoAway(CodeGoingAway, "drain")
	r.write(r.node, f[500:])
	rest := make([]byte, len(f)-500)
	if _, err := io.ReadFull(r.cr, rest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), f) {
		t.Fatal("frame changed in flight")
	}
	expectClose(t, r.client, r.cr, CodeGoingAway, false)
	r.write(r.client, wsframe.AppendClose(nil, 1000, "", &testMask))
	expectClose(t, r.node, r.nr, 1000, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	r.waitEnd()
}

// TestPartialHeaderHeldBack pins that the first bytes of a header are not
// forwarded until the header is complete, so a close injected meanwhile
// lands on a clean boundary.
func TestPartialHeaderHeldBack(t *testing.T) {
	r := newRig(t, 0)
	f := frame(wsframe.OpBinary, true, false, []byte("abc"))
	r.write(r.node, f[:1])
	// Let the byte arrive, observed through the tunnel's own counter.
	waitFor(t, func() bool { return r.tun.Stats().BytesToClient == 1 })
	r.tun.GoAway(CodeGoingAway, "drain")
	expectClose(t, r.client, r.cr, CodeGoingAway, false)
	r.write(r.node, f[1:])
	r.write(r.client, wsframe.AppendClose(nil, 1000, "", &testMask))
	expectClose(t, r.node, r.nr, 1000, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	r.waitEnd()
}

func TestNodeVanishesGives1012(t *testing.T) {
	r := newRig(t, 0)
	r.write(r.node, frame(wsframe.OpText, true, false, []byte("last")))
	readFrame(t, r.client, r.cr)
	_ = r.node.Close()
	expectClose(t, r.client, r.cr, CodeServiceRestart, false)
	r.write(r.client, wsframe.AppendClose(nil, CodeServiceRestart, "", &testMask))
	r.waitEnd()
}

func TestClientVanishesGives1001ToNode(t *testing.T) {
	r := newRig(t, 0)
	_ = r.client.Close()
	expectClose(t, r.node, r.nr, CodeGoingAway, true)
	r.write(r.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	r.waitEnd()
}

func TestTooLargeFrameGives1009(t *testing.T) {
	r := newRig(t, 100)
	r.write(r.client, frame(wsframe.OpBinary, true, true, make([]byte, 100)))
	readFrame(t, r.node, r.nr)
	r.write(r.client, frame(wsframe.OpBinary, true, true, make([]byte, 101)))
	// The node is told first; its close answers the gateway's, and the
	// client gets the 1009 in its place.
	expectClose(t, r.node, r.nr, CodeGoingAway, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	expectClose(t, r.client, r.cr, CodeTooBig, false)
	r.waitEnd()
}

func TestUnmaskedClientFrameGives1002(t *testing.T) {
	r := newRig(t, 0)
	r.write(r.client, frame(wsframe.OpBinary, true, false, []byte("x")))
	expectClose(t, r.node, r.nr, CodeGoingAway, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	expectClose(t, r.client, r.cr, CodeProtocolError, false)
	r.waitEnd()
}

func TestPendingBytesForwardedFirst(t *testing.T) {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	lease := &countingLease{}
	tun := New(Params{
		Client: gwClient, Node: gwNode, Lease: lease,
		ClientPending: frame(wsframe.OpText, true, true, []byte("early-c")),
		NodePending:   frame(wsframe.OpText, true, false, []byte("early-n")),
	})
	tun.Start()
	if _, p := readFrame(t, node, bufio.NewReader(node)); string(p) != "early-c" {
		t.Fatalf("node got %q", p)
	}
	if _, p := readFrame(t, client, bufio.NewReader(client)); string(p) != "early-n" {
		t.Fatalf("client got %q", p)
	}
	tun.Abort()
	<-tun.Done()
	if lease.n.Load() != 1 {
		t.Fatal("lease not released once")
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGoAwayInsideNodeCloseSendsOneClose pins a close frame sent twice: a
// GoAway that came while the node's own close frame was in flight was
// injected right behind that frame when it ended, so the client read two
// close frames. The node's close answers for the gateway's.
func TestGoAwayInsideNodeCloseSendsOneClose(t *testing.T) {
	r := newRig(t, 0)
	f := wsframe.AppendClose(nil, 1000, "node says bye", nil)
	r.write(r.node, f[:4])
	got := make([]byte, 4)
	_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(r.cr, got); err != nil {
		t.Fatal(err)
	}
	r.tun.GoAway(CodeGoingAway, "drain")
	r.write(r.node, f[4:])
	rest := make([]byte, len(f)-4)
	if _, err := io.ReadFull(r.cr, rest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), f) {
		t.Fatal("close frame changed in flight")
	}
	r.write(r.client, wsframe.AppendClose(nil, 1000, "", &testMask))
	expectClose(t, r.node, r.nr, 1000, true)
	r.waitEnd()
	_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(r.cr); len(b) > 0 {
		t.Fatalf("client read % x (%v) after the node's close", b, err)
	}
	if c := r.tun.Stats().GatewayToClientCode; c != 0 {
		t.Fatalf("gateway's own close to the client recorded as %d, want none", c)
	}
}
