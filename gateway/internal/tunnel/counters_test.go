package tunnel

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestCountersFollowTunnels checks that tunnels sharing Counters add to
// them as they forward, live and ended alike: the totals equal the sum of
// the tunnels' own Stats at every step, so a scrape reads the totals
// without visiting a tunnel.
func TestCountersFollowTunnels(t *testing.T) {
	var c Counters
	rigs := make([]*rig, 3)
	for i := range rigs {
		client, gwClient := clientPair(t)
		gwNode, node := nodePair(t)
		r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
		r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
		r.tun = New(Params{Client: gwClient, Node: gwNode, CloseTimeout: 10 * time.Second, Lease: r.lease, Counters: &c})
		r.tun.Start()
		rigs[i] = r
	}
	sum := func() Stats {
		var s Stats
		for _, r := range rigs {
			st := r.tun.Stats()
			s.FramesToNode += st.FramesToNode
			s.FramesToClient += st.FramesToClient
			s.BytesToNode += st.BytesToNode
			s.BytesToClient += st.BytesToClient
		}
		return s
	}
	check := func(step string) {
		t.Helper()
		if got, want := c.Totals(), sum(); got != want {
			t.Fatalf("%s: totals %+v, want the tunnels' sum %+v", step, got, want)
		}
	}
	for i, r := range rigs {
		for range i + 1 {
			m := bytes.Repeat([]byte("m"), 100*(i+1))
			r.write(r.client, frame(wsframe.OpBinary, true, true, m))
			readFrame(t, r.node, r.nr)
			r.write(r.node, frame(wsframe.OpText, true, false, m))
			readFrame(t, r.client, r.cr)
		}
	}
	check("live")
	if got := c.Totals(); got.FramesToNode != 6 || got.FramesToClient != 6 {
		t.Fatalf("live totals %+v, want 6 frames each way", got)
	}
	for _, r := range rigs {
		r.write(r.client, wsframe.AppendClose(nil, 1000, "", &testMask))
		expectClose(t, r.node, r.nr, 1000, true)
		r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
		expectClose(t, r.client, r.cr, 1000, false)
		r.waitEnd()
	}
	check("ended")
}
