package tunnel

import (
	"bufio"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// newRigWith is newRig with the keepalive and rate fields of p (the
// connections, lease and close timeout are the rig's).
func newRigWith(t *testing.T, p Params) *rig {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
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
