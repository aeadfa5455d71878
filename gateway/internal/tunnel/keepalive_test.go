package tunnel

import (
	"bufio"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// newRigWith is newRig with the keepalive and rate fields of p (the
// connections, lease and close timeout are the rig's).
func newRigWith(t *testing.T, p Params) *rig {
	client, gwClient := clientPair(t)
	gwNode, node := tcpPair(t)
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
	p.Client, p.Node, p.Lease, p.CloseTimeout = gwClient, gwNode, r.lease, 10*time.Second
	r.tun = New(p)
	r.tun.Start()
	return r
}

// TestKeepalivePingsSilentClient: a silent client gets a ping; its pong
// keeps the tunnel (and goes on to the node, as an unsolicited pong may);
// silent again after the next ping, it is cut and the node gets 1001.
func TestKeepalivePingsSilentClient(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 100 * time.Millisecond, PongTimeout: 300 * time.Millisecond})
	h, p := readFrame(t, r.client, r.cr)
	if h.Op != wsframe.OpPing || h.Masked || len(p) != 0 {
		t.Fatalf("got %v (masked %v, %d bytes), want an empty unmasked ping", h.Op, h.Masked, len(p))
	}
	r.write(r.client, frame(wsframe.OpPong, true, true, nil))
	if h, _ := readFrame(t, r.node, r.nr); h.Op != wsframe.OpPong {
		t.Fatalf("node got %v, want the client's pong", h.Op)
	}
	// Silent from now on: the next ping goes unanswered.
	if h, _ := readFrame(t, r.client, r.cr); h.Op != wsframe.OpPing {
		t.Fatalf("got %v, want a second ping", h.Op)
	}
	expectClose(t, r.node, r.nr, CodeGoingAway, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	r.waitEnd()
	if got := r.tun.EndReason(); got != EndPongTimeout {
		t.Fatalf("end reason %v, want %v", got, EndPongTimeout)
	}
}

// TestKeepaliveQuietWhileClientTalks: a client that keeps sending gets no
// ping, and node frames pass untouched between the looks.
func TestKeepaliveQuietWhileClientTalks(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 200 * time.Millisecond, PongTimeout: time.Second})
	for i := range 12 {
		r.write(r.client, frame(wsframe.OpText, true, true, []byte("tick")))
		if h, _ := readFrame(t, r.node, r.nr); h.Op != wsframe.OpText {
			t.Fatalf("frame %d: node got %v", i, h.Op)
		}
		r.write(r.node, frame(wsframe.OpText, true, false, []byte("tock")))
		if h, _ := readFrame(t, r.client, r.cr); h.Op != wsframe.OpText {
			t.Fatalf("frame %d: client got %v, want the node's text (no ping)", i, h.Op)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.closeNormally()
}

// TestPingWaitsForFrameEnd: a ping due while a node frame is half sent goes
// after that frame, never inside it.
func TestPingWaitsForFrameEnd(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 50 * time.Millisecond, PongTimeout: 5 * time.Second})
	f := frame(wsframe.OpBinary, true, false, make([]byte, 100))
	r.write(r.node, f[:30])
	time.Sleep(300 * time.Millisecond) // several looks at a silent client
	r.write(r.node, f[30:])
	h, p := readFrame(t, r.client, r.cr)
	if h.Op != wsframe.OpBinary || len(p) != 100 {
		t.Fatalf("got %v of %d bytes, want the node's 100-byte frame whole", h.Op, len(p))
	}
	if h, _ := readFrame(t, r.client, r.cr); h.Op != wsframe.OpPing {
		t.Fatalf("got %v after the frame, want the ping", h.Op)
	}
}

// TestRateLimitGives1008: a client over its frame or byte rate gets 1008
// after the node's replies to what it sent before, and the node gets 1001.
func TestRateLimitGives1008(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"frames", Params{FrameRate: 10}},
		{"bytes", Params{ByteRate: 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRigWith(t, c.p)
			var burst []byte
			for range 20 { // 20 frames of 106 bytes: over 10 a second and over 1000 bytes
				burst = append(burst, frame(wsframe.OpBinary, true, true, make([]byte, 100))...)
			}
			r.write(r.client, burst)
			_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				h, _, err := readFrameErr(r.nr)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					// The cut came inside a frame (over TLS the burst
					// arrives in records): the node's stream ends there
					// (see TestRateLimitNeverClosesInsideAFrame).
					r.node.Close()
					break
				}
				if err != nil {
					t.Fatalf("node read: %v", err)
				}
				if h.Op == wsframe.OpClose {
					// The 1001, checked by the node's reply.
					r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
					break
				}
			}
			expectClose(t, r.client, r.cr, CodePolicy, false)
			r.waitEnd()
		})
	}
}

// TestRateLimitAllowsSteadySender: a client under its rates is never cut.
func TestRateLimitAllowsSteadySender(t *testing.T) {
	r := newRigWith(t, Params{FrameRate: 100, ByteRate: 100 << 10})
	for i := range 30 {
		r.write(r.client, frame(wsframe.OpText, true, true, []byte("steady")))
		if h, _ := readFrame(t, r.node, r.nr); h.Op != wsframe.OpText {
			t.Fatalf("frame %d: node got %v", i, h.Op)
		}
	}
	r.closeNormally()
}

// TestRateLimitBucket is the token bucket's arithmetic: a second's worth of
// burst, refilled at the rate.
func TestRateLimitBucket(t *testing.T) {
	const s = int64(time.Second)
	r := newRateLimit(10, 0)
	r.last = 0
	for _, c := range []struct {
		at     int64
		frames uint64
		ok     bool
	}{
		{0, 10, true},      // the burst
		{0, 1, false},      // nothing left
		{s / 2, 4, true},   // 5 refilled, 1 owed from before: 4 fit
		{s / 2, 1, false},  // empty again
		{10 * s, 10, true}, // refilled to the burst, never above it
		{10 * s, 1, false},
	} {
		if got := r.take(c.frames, 0, c.at); got != c.ok {
			t.Fatalf("take(%d) at %v: %v, want %v", c.frames, time.Duration(c.at), got, c.ok)
		}
	}
}

// closeNormally runs a 1000 close handshake started by the client and
// waits for the tunnel's end.
func (r *rig) closeNormally() {
	r.t.Helper()
	r.write(r.client, wsframe.AppendClose(nil, 1000, "", &testMask))
	expectClose(r.t, r.node, r.nr, 1000, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	expectClose(r.t, r.client, r.cr, 1000, false)
	r.waitEnd()
}
