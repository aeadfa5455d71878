package tunnel

import (
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"

	"golang.org/x/sys/unix"
)

// fillSocket fills the gateway's socket toward a client that reads
// nothing, behind the tunnel's back: no write of the tunnel's is in
// flight, and none of its clocks runs. Full: three writes in a row take
// nothing in 200 ms.
func fillSocket(t *testing.T, rawGW net.Conn) {
	t.Helper()
	junk := make([]byte, 64<<10)
	for none, tries := 0, 0; none < 3; tries++ {
		if tries == 1000 {
			t.Fatal("the client's socket never filled")
		}
		_ = rawGW.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _ := rawGW.Write(junk); n == 0 {
			none++
		} else {
			none = 0
		}
	}
	_ = rawGW.SetWriteDeadline(time.Time{})
}

// TestTLSAbortAlertInFlight pins issue 19 item 1's drain cut with a write
// in flight below crypto/tls: a TLS client that reads nothing sends a
// record that does not decrypt; crypto/tls's read side answers it with an
// alert, which, holding the connection's write lock, waited in the
// TLSSocket's probes for the tunnel's write timeout (nothing told it the
// tunnel was closing). Abort's close_notify waited on that lock with the
// socket still open, so Abort blocked for the whole write timeout, and a
// drain, which aborts its tunnels one at a time, overran drain_timeout by
// as much. Now the close wakes the write, which gives up, and Abort
// returns at once.
func TestTLSAbortAlertInFlight(t *testing.T) {
	rawClient, sock, tun := smallTLSTunnel(t)
	rawGW := sock.Conn
	fillSocket(t, rawGW)
	// An application-data record of 27 bytes that is no AEAD output of
	// the session: the gateway's read fails and sends bad_record_mac.
	bad := append([]byte{23, 3, 3, 0, 27}, make([]byte, 27)...)
	if _, err := rawClient.Write(bad); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); sock.probes.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway's alert never stalled on the full socket")
		}
	}
	aborted := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		tun.Abort()
		aborted <- time.Since(start)
	}()
	// The write timeout is a minute: ten seconds tell a wait on it from
	// a prompt close on any machine.
	select {
	case took := <-aborted:
		t.Logf("Abort returned after %v", took)
	case <-time.After(10 * time.Second):
		t.Fatal("Abort still blocked after 10 s: the close waits on the alert's write for the write timeout")
	}
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("aborted tunnel did not end")
	}
	if got := tun.EndReason(); got != EndAborted {
		t.Errorf("end reason %v, want %v", got, EndAborted)
	}
}

// TestTLSClientHangUpEndsStalledNodeWrite pins issue 19 item 3: while the
// gateway's write to a node that reads nothing is stalled, a TLS client
// that hangs up was not noticed, since the hang-up probe looked for a
// socket on the TLS connection itself (which has none) instead of under
// it; the tunnel lived on to the write timeout. Now the stalled write sees
// the hang-up at its next probe and the close timeout ends the tunnel.
func TestTLSClientHangUpEndsStalledNodeWrite(t *testing.T) {
	const closeTimeout = time.Second
	client, gwClient := cryptoTLSPair(t)
	gwNode, node := nodePair(t)
	if err := node.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if err := setSockBuf(gwNode, unix.SO_SNDBUF, 4<<10); err != nil {
		t.Fatal(err)
	}
	// Room for what the client sends behind the stall, so its
	// close_notify and its end of stream reach the gateway's kernel.
	if err := tcpOf(gwClient).SetReadBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	tun := New(Params{Client: gwClient, Node: gwNode, WriteTimeout: time.Minute, CloseTimeout: closeTimeout})
	tun.Start()
	if got := tun.Engine(); got != "goroutines" {
		t.Fatalf("engine %q, want goroutines (a TLS client's)", got)
	}
	f := frame(wsframe.OpBinary, true, true, make([]byte, 1020))
	var flood []byte
	for len(flood) < 96<<10 {
		flood = append(flood, f...)
	}
	_ = client.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Write(flood); err != nil {
		t.Fatalf("client flood: %v", err)
	}
	waitHalfStalled(t, &tun.toNode)
	closed := time.Now()
	_ = client.Close()
	select {
	case <-tun.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("tunnel did not end 20 s after its TLS client hung up (write timeout 1 min): the stalled write to the node never saw the hang-up")
	}
	t.Logf("tunnel ended %v after the client hung up (close timeout %v)", time.Since(closed).Round(time.Millisecond), closeTimeout)
	if got := tun.EndReason(); got != EndCloseTimeout {
		t.Errorf("end reason %v, want %v", got, EndCloseTimeout)
	}
}
