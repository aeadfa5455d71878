package tunnel

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"

	"golang.org/x/sys/unix"
)

// TestStalledNodeWriteTimeout: a node that never reads while its client
// floods is cut at the write timeout and the client gets 1012. On the
// event-driven engine the write timeout was often the poller's last timer:
// with its deadline passed and no timer left, the poller marked the
// deadline as none and never cleared it, so every wait failed at once and
// no event (the node's shut-down socket among them) was seen again.
func TestStalledNodeWriteTimeout(t *testing.T) {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	if err := node.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if err := setSockBuf(gwNode, unix.SO_SNDBUF, 4<<10); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
	r.tun = New(Params{Client: gwClient, Node: gwNode, WriteTimeout: 300 * time.Millisecond,
		CloseTimeout: 5 * time.Second, Lease: r.lease})
	r.tun.Start()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the client floods until it is told to stop
		defer close(done)
		f := frame(wsframe.OpBinary, true, true, make([]byte, 1000))
		for range 200_000 { // bounded: the stall comes after a few tens of KB
			select {
			case <-stop:
				return
			default:
			}
			_ = client.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := client.Write(f); err != nil {
				return
			}
		}
	}()
	expectClose(t, client, r.cr, CodeServiceRestart, false)
	close(stop)
	client.Close()
	<-done
	r.waitEnd()
	if got := r.tun.EndReason(); got != EndWriteTimeout {
		t.Fatalf("end reason %v, want %v", got, EndWriteTimeout)
	}
}
