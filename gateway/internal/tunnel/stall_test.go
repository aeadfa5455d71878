package tunnel

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"

	"golang.org/x/sys/unix"
)

// stallRig is a tunnel whose client never reads: the test's client end has
// a small receive buffer and the gateway's end of it a small send buffer, so
// a write to the client stalls after a few tens of KB.
type stallRig struct {
	*rig
	gwNode net.Conn // the gateway's end of the node connection
}

func newStallRig(t *testing.T, closeTimeout, writeTimeout time.Duration) *stallRig {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	if err := tcpOf(client).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if err := tcpOf(gwClient).SetWriteBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	// Room for what the node sends behind the stall, so its close and its
	// end of stream reach the gateway's kernel.
	if err := setSockBuf(gwNode, unix.SO_RCVBUF, 1<<20); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
	r.tun = New(Params{
		Client:       gwClient,
		Node:         gwNode,
		CloseTimeout: closeTimeout,
		WriteTimeout: writeTimeout,
		Lease:        r.lease,
	})
	r.tun.Start()
	return &stallRig{rig: r, gwNode: gwNode}
}

// floodClient has the node send n bytes of 1 KB text frames to the client,
// from a goroutine; the returned channel yields the write's error.
func (r *stallRig) floodClient(n int) <-chan error {
	f := frame(wsframe.OpText, true, false, make([]byte, 1020))
	var b []byte
	for len(b) < n {
		b = append(b, f...)
	}
	errc := make(chan error, 1)
	go func() {
		_ = r.node.SetWriteDeadline(time.Now().Add(20 * time.Second))
		_, err := r.node.Write(b)
		errc <- err
	}()
	return errc
}

// waitStalled waits until the write to the client is stuck: the write turn
// is taken and no byte more has been read from the node for a while.
func waitStalled(t *testing.T, tun *Tunnel) {
	t.Helper()
	waitHalfStalled(t, &tun.toClient)
}

// waitHalfStalled waits until h's write to its destination is stuck: the
// write turn is taken and no byte more has been read from its source for
// a while.
func waitHalfStalled(t *testing.T, h *half) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last, still := uint64(0), 0
	for still < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the write never stalled")
		}
		time.Sleep(10 * time.Millisecond)
		h.mu.Lock()
		writing := h.writing
		h.mu.Unlock()
		n := h.bytes.Load()
		if writing && n == last && n > 0 {
			still++
		} else {
			still = 0
		}
		last = n
	}
}

// returnsWithin fails the test when f does not return within d.
func returnsWithin(t *testing.T, what string, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s blocked for %v while a write was stalled", what, d)
	}
}

// TestWriteTimeoutEndsTunnel pins the fix for a client that stops reading:
// the write to it used to have no deadline, so the tunnel (and its node
// slot) lived forever. Now a destination that accepts no byte for the write
// timeout ends the tunnel, with that reason, and the node hears 1001.
func TestWriteTimeoutEndsTunnel(t *testing.T) {
	r := newStallRig(t, 10*time.Second, 300*time.Millisecond)
	errc := r.floodClient(256 << 10)
	expectClose(t, r.node, r.nr, CodeGoingAway, true)
	// The node's frames behind the stall are dropped; its close reply
	// then ends the tunnel.
	if err := <-errc; err != nil {
		t.Fatalf("node flood: %v", err)
	}
	r.write(r.node, wsframe.AppendClose(nil, CodeGoingAway, "", nil))
	r.waitEnd()
	if got := r.tun.EndReason(); got != EndWriteTimeout {
		t.Fatalf("end reason %v, want %v", got, EndWriteTimeout)
	}
}

// TestStatsAndGoAwayDoNotWaitOnStalledWrite pins the fix for the gateway
// stall: forward held the direction's lock across a write to a client that
// never read, so Stats (every scrape) and GoAway (every drain) blocked on
// it. Both must return at once while the write is stuck, and the close
// deadline GoAway starts must then end the tunnel.
func TestStatsAndGoAwayDoNotWaitOnStalledWrite(t *testing.T) {
	const closeTimeout = 500 * time.Millisecond
	r := newStallRig(t, closeTimeout, time.Hour)
	r.floodClient(1 << 20)
	waitStalled(t, r.tun)

	var st Stats
	returnsWithin(t, "Stats", time.Second, func() { st = r.tun.Stats() })
	if st.BytesToClient == 0 || st.FramesToClient == 0 {
		t.Fatalf("stats %+v, want the bytes and frames read from the node", st)
	}
	returnsWithin(t, "GoAway", time.Second, func() { r.tun.GoAway(CodeGoingAway, "drain") })
	// The client never takes the close: at the close deadline it is cut,
	// and so is the node, with its flood still unread.
	r.waitEnd()
	if got := r.tun.EndReason(); got != EndCloseTimeout {
		t.Fatalf("end reason %v, want %v", got, EndCloseTimeout)
	}
}

// TestNodeCloseEndsStalledTunnel pins that a node that has closed ends the
// tunnel within the close timeout even though the client never reads: the
// pump, stuck writing to the client, used to never read the node's close
// nor its end of stream, and the tunnel outlived the node.
func TestNodeCloseEndsStalledTunnel(t *testing.T) {
	const closeTimeout = time.Second
	for _, tc := range []struct {
		name      string
		closeWith []byte // sent before the end of stream
	}{
		{"close frame then EOF", wsframe.AppendClose(nil, 1013, "slow consumer", nil)},
		{"EOF only", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStallRig(t, closeTimeout, time.Hour)
			errc := r.floodClient(96 << 10)
			waitStalled(t, r.tun)
			if err := <-errc; err != nil {
				t.Fatalf("node flood: %v", err)
			}
			if len(tc.closeWith) > 0 {
				r.write(r.node, tc.closeWith)
			}
			closed := time.Now()
			_ = r.node.Close()
			r.waitEnd()
			took := time.Since(closed)
			t.Logf("tunnel ended %v after the node closed (close timeout %v)", took.Round(time.Millisecond), closeTimeout)
			// The close deadline starts when the stalled write sees the
			// hang-up, within stallProbe; the rest is scheduling slack.
			if limit := closeTimeout + stallProbe + time.Second; took > limit {
				t.Fatalf("tunnel ended %v after the node closed, want within %v", took, limit)
			}
			if got := r.tun.EndReason(); got != EndCloseTimeout {
				t.Fatalf("end reason %v, want %v", got, EndCloseTimeout)
			}
		})
	}
}
