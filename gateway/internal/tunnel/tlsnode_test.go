package tunnel

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// tlsNodeRig is a tunnel whose node is TLS, the gateway the TLS client
// over a TLSSocket ([pools.tls] with protocol = "http1"), with small
// socket buffers toward the node: a node that does not read stalls the
// tunnel's writes at once.
type tlsNodeRig struct {
	tun    *Tunnel
	client net.Conn // the test's plain client
	node   net.Conn // the test's TLS node (server side)
	sock   *TLSSocket
}

func newTLSNodeRig(t *testing.T, p Params) *tlsNodeRig {
	t.Helper()
	client, gwClient := tcpPair(t)
	rawGW, rawNode := tcpPair(t)
	if err := rawNode.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := rawGW.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	sock := NewTLSSocket(rawGW)
	gwNode, node := tlsOver(t, sock, rawNode) // the gateway is the TLS client here
	p.Client, p.Node, p.Lease = gwClient, gwNode, &countingLease{}
	r := &tlsNodeRig{client: client, node: node, sock: sock}
	r.tun = New(p)
	r.tun.Start()
	return r
}

// TestTLSNodePausedReaderKeepsTunnel checks that a TLS node (the gateway
// its TLS client, on a TLSSocket) that pauses reading for 1.5 s while
// its client streams keeps its tunnel: the writes toward it wait in
// probes below crypto/tls, as toward a TLS client, and it then gets
// every byte.
func TestTLSNodePausedReaderKeepsTunnel(t *testing.T) {
	const n, size = 64, 64 << 10 // 4 MiB, far more than the sockets hold
	r := newTLSNodeRig(t, Params{WriteTimeout: 30 * time.Second, CloseTimeout: 10 * time.Second})
	var want bytes.Buffer
	for i := range n {
		want.Write(frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{byte(i)}, size)))
	}
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		_ = r.client.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, werr = r.client.Write(want.Bytes())
	})
	for deadline := time.Now().Add(10 * time.Second); r.sock.probes.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the client's stream never stalled the writes to the node")
		}
	}
	time.Sleep(1500 * time.Millisecond) // the node reads nothing
	if got := r.tun.EndReason(); got != 0 {
		t.Fatalf("tunnel ending during the pause: %v", got)
	}
	got := make([]byte, want.Len())
	_ = r.node.SetReadDeadline(time.Now().Add(20 * time.Second))
	if k, err := io.ReadFull(r.node, got); err != nil {
		t.Fatalf("node read %d of %d bytes after its pause: %v (tunnel end: %v)", k, len(got), err, r.tun.EndReason())
	}
	wg.Wait()
	if werr != nil {
		t.Fatalf("client stream: %v", werr)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the node got other bytes than the client sent")
	}
	t.Logf("writes tried on the node's socket: %d, %d of them woke at a probe", r.sock.writes.Load(), r.sock.probes.Load())
}

// TestTLSNodeAbortFullNodeAtOnce checks that Abort of a tunnel whose TLS
// node has a full socket ends at once: the node's close_notify is
// dropped, as a TLS client's is, rather than waited for up to crypto/tls's
// 5 s.
func TestTLSNodeAbortFullNodeAtOnce(t *testing.T) {
	r := newTLSNodeRig(t, Params{WriteTimeout: time.Minute, CloseTimeout: time.Minute})
	rawGW := r.sock.Conn
	// Fill the node's socket behind the tunnel's back; full: three
	// writes in a row take nothing in 200 ms.
	junk := make([]byte, 64<<10)
	for none := 0; none < 3; {
		_ = rawGW.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _ := rawGW.Write(junk); n == 0 {
			none++
		} else {
			none = 0
		}
	}
	_ = rawGW.SetWriteDeadline(time.Time{})
	start := time.Now()
	r.tun.Abort()
	select {
	case <-r.tun.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("aborted tunnel did not end")
	}
	if took := time.Since(start); took >= 5*time.Second {
		t.Fatalf("Abort took %v: the close waited on close_notify into the node's full socket", took)
	}
}
