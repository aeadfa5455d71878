package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"

	"golang.org/x/sys/unix"
)

// TestPongTimeoutBehindStalledNodeTellsNode: a client whose frames wait for
// a node that reads nothing, and that then answers no ping, is cut with
// pong_timeout. The node must still get its close 1001 once it has read
// the frames in flight, as it does on the goroutine engine (the pump ends
// the client side once its write is done). On the event-driven engine the
// client side ends while the client→node half holds a tail; lastWord used
// to find the write turn taken and send nothing, so the node read its
// frames, then nothing until the close timeout cut it without a close
// frame. The close now follows the tail.
func TestPongTimeoutBehindStalledNodeTellsNode(t *testing.T) {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	// Small buffers toward the node, so that a few frames fill them.
	_ = setSockBuf(gwNode, unix.SO_SNDBUF, 16<<10)
	_ = node.(*net.TCPConn).SetReadBuffer(16 << 10)
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
	r.tun = New(Params{Client: gwClient, Node: gwNode, Lease: r.lease, CloseTimeout: 10 * time.Second,
		PingInterval: 100 * time.Millisecond, PongTimeout: 200 * time.Millisecond})
	r.tun.Start()
	// One whole frame at a time, so that every read of the client ends on
	// a frame boundary, until the gateway has cut the client.
	one := frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{'b'}, 4<<10))
	go func() {
		for range 5000 {
			if r.tun.EndReason() != 0 {
				return
			}
			if _, err := r.client.Write(one); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	waitFor(t, func() bool { return r.tun.EndReason() == EndPongTimeout })
	// The node now reads what reached it, and then wants a close frame
	// well before the close timeout (10s) ends the tunnel.
	_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
	frames := 0
	for {
		var hb []byte
		var h wsframe.Header
		for {
			b, err := r.nr.ReadByte()
			if err != nil {
				t.Fatalf("node read %d frames, then %v before any close frame (end %v, stats %+v)", frames, err, r.tun.EndReason(), r.tun.Stats())
			}
			hb = append(hb, b)
			var perr error
			if h, _, perr = wsframe.ParseHeader(hb); errors.Is(perr, wsframe.ErrShortHeader) {
				continue
			} else if perr != nil {
				t.Fatalf("bad header % x: %v", hb, perr)
			}
			break
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r.nr, p); err != nil {
			t.Fatalf("node read %d frames, then %v inside a frame", frames, err)
		}
		if h.Op == wsframe.OpClose {
			wsframe.Mask(h.Mask, 0, p)
			if code, _, _ := wsframe.ParseClosePayload(p); code != CodeGoingAway {
				t.Fatalf("node got close %d, want %d", code, CodeGoingAway)
			}
			return
		}
		frames++
	}
}
