package tunnel

import (
	"bytes"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestKeepaliveStreamingClientNotCut: a node streams frames larger than one
// read, back to back, to a client that reads them all and answers every
// ping at once but sends nothing else (a download). The keepalive must
// ping it between two frames and keep it. The ping used to wait for a read
// that ended on a frame boundary, which a saturated stream of large frames
// almost never gives, so the client was cut with pong_timeout while it
// read.
func TestKeepaliveStreamingClientNotCut(t *testing.T) {
	// The pong timeout is generous: a ping waits behind what the sockets
	// already buffer (megabytes on loopback), which a client slowed by a
	// loaded machine and the race detector takes a while to read.
	r := newRigWith(t, Params{PingInterval: 50 * time.Millisecond, PongTimeout: 2 * time.Second})
	const size = 100000
	payload := bytes.Repeat([]byte{'a'}, size)
	one := frame(wsframe.OpBinary, true, false, payload)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 1000000 { // bounded; stopped well before
			select {
			case <-stop:
				return
			default:
			}
			if _, err := r.node.Write(one); err != nil {
				return
			}
		}
	}()
	go func() { // the node takes the client's pongs
		b := make([]byte, 4096)
		for {
			if _, err := r.node.Read(b); err != nil {
				return
			}
		}
	}()
	pong := frame(wsframe.OpPong, true, true, nil)
	pings, got := 0, 0
	until := time.Now().Add(5 * time.Second) // many ping intervals, two pong timeouts
	for time.Now().Before(until) {
		h, p := readFrame(t, r.client, r.cr)
		switch h.Op {
		case wsframe.OpPing:
			pings++
			r.write(r.client, pong)
		case wsframe.OpBinary:
			if !bytes.Equal(p, payload) {
				t.Fatalf("frame %d (after %d pings): payload corrupted", got, pings)
			}
			got++
		default:
			t.Fatalf("frame %d (after %d pings): %v frame; tunnel end %v, stats %+v", got, pings, h.Op, r.tun.EndReason(), r.tun.Stats())
		}
	}
	if end, st := r.tun.EndReason(), r.tun.Stats(); end != 0 || st.GatewayToNodeCode != 0 {
		t.Fatalf("a client reading the stream and answering every ping was cut: end %v, %d frames, %d pings, stats %+v", end, got, pings, st)
	}
	t.Logf("%d frames, %d pings, engine %s", got, pings, r.tun.Engine())
}
