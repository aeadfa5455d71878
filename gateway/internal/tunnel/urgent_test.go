//go:build linux

package tunnel

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestUrgentByteDiscardedFramesWhole pins issue 19 item 7: a peer that sends
// a frame, one TCP urgent byte (MSG_OOB) and a frame stalled that direction
// on the epoll engine. A read stops at the urgent mark, so the first read
// was short with the second frame still buffered behind the mark, and the
// short-read rule waited for an edge that never came. The gateway leaves
// SO_OOBINLINE off, as nginx and HAProxy do: the urgent byte is not part of
// the stream (WebSocket has no use for it) and is dropped, and both frames
// arrive whole, as they do on the goroutine engine. The three writes are
// all in the gateway's socket before the tunnel starts, so the first read
// meets the mark every time.
func TestUrgentByteDiscardedFramesWhole(t *testing.T) {
	for _, dir := range []string{"client to node", "node to client"} {
		t.Run(dir, func(t *testing.T) {
			client, gwClient := tcpPair(t)
			gwNode, node := nodePair(t)
			toNode := dir == "client to node"
			from, to := client, node
			if !toNode {
				from, to = node, client
			}
			first := frame(wsframe.OpBinary, true, toNode, bytes.Repeat([]byte("a"), 300))
			second := frame(wsframe.OpText, true, toNode, []byte("after the urgent byte"))
			if _, err := from.Write(first); err != nil {
				t.Fatal(err)
			}
			sendUrgent(t, from, '!')
			if _, err := from.Write(second); err != nil {
				t.Fatal(err)
			}
			waitAcked(t, from)

			r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
			r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
			r.tun = New(Params{Client: gwClient, Node: gwNode, CloseTimeout: 10 * time.Second, Lease: r.lease})
			r.tun.Start()
			tr := r.nr
			if !toNode {
				tr = r.cr
			}
			h, p := readFrame(t, to, tr)
			if h.Op != wsframe.OpBinary || len(p) != 300 {
				t.Fatalf("first frame: %v, %d bytes; want binary, 300 bytes", h.Op, len(p))
			}
			h, p = readFrame(t, to, tr)
			if h.Op != wsframe.OpText || string(p) != "after the urgent byte" {
				t.Fatalf("second frame: %v %q", h.Op, p)
			}
			r.closeNormally()
		})
	}
}

// sendUrgent sends b as TCP urgent data (MSG_OOB) on c's socket.
func sendUrgent(t *testing.T, c net.Conn, b byte) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Sendto(int(fd), []byte{b}, unix.MSG_OOB, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("send MSG_OOB: %v", serr)
	}
}

// waitAcked waits until the peer of c's socket has acknowledged every
// byte c sent, so all of it is in the peer's receive queue. (The reader's
// SIOCINQ counts only the bytes before an urgent mark.)
func waitAcked(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		unacked := -1
		_ = rc.Control(func(fd uintptr) {
			if n, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
				unacked = n
			}
		})
		return unacked == 0
	})
}
