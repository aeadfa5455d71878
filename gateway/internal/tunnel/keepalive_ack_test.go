package tunnel

import (
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestKeepaliveCutsSilentClientAtFirstLook pins issue 19 item 3's review,
// case (a): after a ping, a client whose TCP stack had acknowledged more
// bytes since the last look counted as taking bytes, and the last look
// read that count before the ping went out; the client's stack
// acknowledges the ping itself within a round trip, so a silent client
// (it sends nothing, reads nothing, and nothing flows toward it) was cut
// one pong_timeout late, at the second look after the ping. The ping's own
// acknowledgement is now no sign of life: the client is cut at the first
// look after the ping, its second look in all.
func TestKeepaliveCutsSilentClientAtFirstLook(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 200 * time.Millisecond, PongTimeout: 500 * time.Millisecond})
	waitFor(t, func() bool { return r.tun.EndReason() != 0 })
	if end := r.tun.EndReason(); end != EndPongTimeout {
		t.Fatalf("end reason %v, want %v", end, EndPongTimeout)
	}
	if n := r.tun.ka.looks.Load(); n != 2 {
		t.Fatalf("cut at look %d, want look 2 (one to ping, the next to cut)", n)
	}
}

// trickleFromNode has the node write a 1 KiB frame every 100 ms until the
// test ends (or 1,000 frames), and read (and drop) what the client sends.
func trickleFromNode(t *testing.T, r *rig) {
	one := frame(wsframe.OpBinary, true, false, make([]byte, 1<<10))
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for range 1000 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_ = r.node.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := r.node.Write(one); err != nil {
				return
			}
		}
	}()
	go func() {
		b := make([]byte, 4096)
		for {
			if _, err := r.node.Read(b); err != nil {
				return
			}
		}
	}()
}

// waitCut waits up to limit for the tunnel to end on its keepalive.
func waitCut(t *testing.T, r *rig, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); r.tun.EndReason() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("not cut within %v (stats %+v)", limit, r.tun.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if end := r.tun.EndReason(); end != EndPongTimeout {
		t.Fatalf("end reason %v, want %v", end, EndPongTimeout)
	}
}

// TestKeepaliveCutsHungClientWhileNodeTrickles pins issue 19 item 3's
// review, case (b): a client whose application neither reads nor sends
// while its node trickles frames toward it was never cut. Its receive
// buffer takes the trickle without the application reading, so its TCP
// stack acknowledges more at every look, which counted as taking bytes.
// Bytes acknowledged after the ping itself are no sign of life: once the
// ping is acknowledged the client has one pong_timeout to answer. The
// client's receive buffer is made large (as a client's autotuned one
// grows), so that it takes the trickle for the whole test: with a small
// one it fills, its stack acknowledges no more, and the client was cut
// then, seconds late.
func TestKeepaliveCutsHungClientWhileNodeTrickles(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 200 * time.Millisecond, PongTimeout: 500 * time.Millisecond})
	if err := tcpOf(r.client).SetReadBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	trickleFromNode(t, r)
	waitCut(t, r, 15*time.Second)
}

// TestKeepaliveCapsPingBehindNodeFrame: the same hung client, while the
// node trickles the payload of one long frame: the ping waits for that
// frame's end, and a ping that waits for the node was waited for without
// end. The whole wait after a ping is capped at write_timeout plus
// pong_timeout (issue 19 item 3's review).
func TestKeepaliveCapsPingBehindNodeFrame(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 200 * time.Millisecond, PongTimeout: 300 * time.Millisecond,
		WriteTimeout: time.Second})
	hdr := frame(wsframe.OpBinary, true, false, make([]byte, 1<<20))
	hdr = hdr[:len(hdr)-1<<20]
	r.write(r.node, hdr)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		piece := make([]byte, 100)
		for range 10000 { // 1 MB: the frame never ends within the test
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_ = r.node.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := r.node.Write(piece); err != nil {
				return
			}
		}
	}()
	waitCut(t, r, 15*time.Second)
}
