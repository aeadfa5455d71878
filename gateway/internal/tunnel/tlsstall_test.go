package tunnel

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// countedTLS is the gateway's end of a TLS client connection that counts
// the tunnel's writes to it: a write that returns at once, again and
// again, shows up here (crypto/tls answers it without touching the
// socket), the socket's own attempts in TLSSocket.writes.
type countedTLS struct {
	*tls.Conn
	writes atomic.Uint64
}

func (c *countedTLS) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// tlsStreamRig is a tunnel whose client is TLS over small socket buffers
// and whose node streams frames to it: a client that does not read stalls
// the tunnel's writes at once.
type tlsStreamRig struct {
	t      *testing.T
	tun    *Tunnel
	client net.Conn // the test's TLS client
	node   net.Conn
	gw     *countedTLS
	sock   *TLSSocket
	lease  *countingLease
}

func newTLSStreamRig(t *testing.T, p Params) *tlsStreamRig {
	rawClient, rawGW := tcpPair(t)
	// Little room between the node and the client, so a client that
	// pauses stalls the gateway's writes within the first frames.
	if err := rawClient.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := rawGW.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	sock := NewTLSSocket(rawGW)
	client, gw := tlsOver(t, rawClient, sock)
	gwNode, node := nodePair(t)
	r := &tlsStreamRig{t: t, client: client, node: node, gw: &countedTLS{Conn: gw.(*tls.Conn)}, sock: sock, lease: &countingLease{}}
	p.Client, p.Node, p.Lease = r.gw, gwNode, r.lease
	if p.CloseTimeout == 0 {
		p.CloseTimeout = 10 * time.Second
	}
	r.tun = New(p)
	r.tun.Start()
	return r
}

// waitStall waits until a write to the client has stalled: it timed out
// at a probe on the socket, or inside crypto/tls.
func (r *tlsStreamRig) waitStall() {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); r.sock.probes.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatal("the node's stream never stalled the gateway's writes")
		}
	}
}

// attempts is the writes to the client so far, at the TLS connection
// and on the socket.
func (r *tlsStreamRig) attempts() uint64 { return r.gw.writes.Load() + r.sock.writes.Load() }

// stream sends n binary frames of size bytes from the node, each filled
// with its index, in a goroutine of its own; the returned function waits
// for it and reports its error.
func (r *tlsStreamRig) stream(n, size int) func() error {
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			f := frame(wsframe.OpBinary, true, false, bytes.Repeat([]byte{byte(i)}, size))
			_ = r.node.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err = r.node.Write(f); err != nil {
				return
			}
		}
	}()
	return func() error { wg.Wait(); return err }
}

// checkStream parses what the client read: n whole frames of size bytes,
// each filled with its index.
func checkStream(t *testing.T, got []byte, n, size int) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(got))
	for i := range n {
		hb := make([]byte, 0, wsframe.MaxHeaderLen)
		var h wsframe.Header
		for {
			b, err := br.ReadByte()
			if err != nil {
				t.Fatalf("frame %d of %d: stream ends inside its header", i, n)
			}
			hb = append(hb, b)
			var perr error
			if h, _, perr = wsframe.ParseHeader(hb); perr == nil {
				break
			}
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(br, p); err != nil || int(h.Length) != size {
			t.Fatalf("frame %d of %d: %d bytes (%v), want %d", i, n, h.Length, err, size)
		}
		if !bytes.Equal(p, bytes.Repeat([]byte{byte(i)}, size)) {
			t.Fatalf("frame %d of %d: wrong payload", i, n)
		}
	}
}

// streamLen is the length on the wire of n unmasked frames of size bytes.
func streamLen(n, size int) int {
	return n * len(frame(wsframe.OpBinary, true, false, make([]byte, size)))
}

// echo checks the tunnel still carries frames both ways.
func (r *tlsStreamRig) echo() {
	r.t.Helper()
	if _, err := r.client.Write(frame(wsframe.OpText, true, true, []byte("still here"))); err != nil {
		r.t.Fatalf("client write after the stream: %v", err)
	}
	nr := bufio.NewReader(r.node)
	if h, p := readFrame(r.t, r.node, nr); h.Op != wsframe.OpText || string(p) != "still here" {
		r.t.Fatalf("node got %v %q, want the client's text", h.Op, p)
	}
	if _, err := r.node.Write(frame(wsframe.OpText, true, false, []byte("pong"))); err != nil {
		r.t.Fatal(err)
	}
	if h, p := readFrame(r.t, r.client, bufio.NewReader(r.client)); h.Op != wsframe.OpText || string(p) != "pong" {
		r.t.Fatalf("client got %v %q, want the node's text", h.Op, p)
	}
	if got := r.tun.EndReason(); got != 0 {
		r.t.Fatalf("tunnel ending (%v), want it alive", got)
	}
}

// TestTLSPausedReaderKeepsTunnel pins issue 19 item 1: a TLS client that
// pauses reading for 1.5 s while its node streams lost its tunnel, since
// the write's first 250 ms probe timed out inside crypto/tls, which made
// the error final, and the gateway then spun on the failed write until the
// write timeout. Now the client gets every byte after its pause, the
// tunnel lives on, and the gateway's writes wake a few times a second
// during the pause, never in a loop.
func TestTLSPausedReaderKeepsTunnel(t *testing.T) {
	const n, size = 64, 64 << 10 // 4 MiB, far more than the sockets hold
	r := newTLSStreamRig(t, Params{WriteTimeout: 30 * time.Second})
	wait := r.stream(n, size)
	r.waitStall()
	before := r.attempts()
	time.Sleep(1500 * time.Millisecond) // the client reads nothing
	during := r.attempts() - before
	t.Logf("writes tried during the 1.5 s pause: %d (TLS %d, socket %d in all)", during, r.gw.writes.Load(), r.sock.writes.Load())
	if r.tun.EndReason() != 0 {
		t.Fatalf("tunnel ending during the pause: %v", r.tun.EndReason())
	}
	// A probe every 250 ms is 6; a spin is thousands.
	if during > 60 {
		t.Errorf("%d writes tried during a 1.5 s pause: the gateway spins on a stalled client", during)
	}
	got := make([]byte, streamLen(n, size))
	_ = r.client.SetReadDeadline(time.Now().Add(20 * time.Second))
	if k, err := io.ReadFull(r.client, got); err != nil {
		t.Fatalf("client read %d of %d bytes after its pause: %v (tunnel end: %v)", k, len(got), err, r.tun.EndReason())
	}
	if err := wait(); err != nil {
		t.Fatalf("node stream: %v", err)
	}
	checkStream(t, got, n, size)
	r.echo()
}

// TestTLSSlowReaderKeepsTunnel pins issue 19 item 1 for a steady slow
// reader: a TLS client taking about 0.8 MB/s in 256 KB bites, 300 ms
// apart, stalled at the first gap longer than a probe (at 4.19 MB in the
// attack), with the gateway spinning. Now it gets the whole stream.
func TestTLSSlowReaderKeepsTunnel(t *testing.T) {
	const n, size = 32, 64 << 10 // 2 MiB: about 2.5 s at this pace
	r := newTLSStreamRig(t, Params{WriteTimeout: 30 * time.Second})
	wait := r.stream(n, size)
	got := make([]byte, streamLen(n, size))
	const bite, gap = 256 << 10, 300 * time.Millisecond
	for off := 0; off < len(got); off += bite {
		time.Sleep(gap)
		end := min(off+bite, len(got))
		_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
		if k, err := io.ReadFull(r.client, got[off:end]); err != nil {
			t.Fatalf("client read %d of %d bytes: %v (tunnel end: %v)", off+k, len(got), err, r.tun.EndReason())
		}
	}
	if err := wait(); err != nil {
		t.Fatalf("node stream: %v", err)
	}
	t.Logf("writes tried: TLS %d, socket %d", r.gw.writes.Load(), r.sock.writes.Load())
	checkStream(t, got, n, size)
	r.echo()
}

// TestTLSAbortFullClientAtOnce pins issue 19 item 1's drain cut: Abort of
// a tunnel whose TLS client has a full socket and no write in flight
// closed the TLS connection with close_notify, which waited for room up to
// crypto/tls's 5 s (the tunnel's own clocks were far off: a minute's write
// timeout, no close started). Now the alert is dropped and the tunnel ends
// at once.
func TestTLSAbortFullClientAtOnce(t *testing.T) {
	_, sock, tun := smallTLSTunnel(t)
	rawGW := sock.Conn
	// Fill the client's socket behind the tunnel's back: no write of
	// the tunnel's is in flight, and none of its clocks runs.
	// Full: three writes in a row take nothing in 200 ms.
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
	tun.Abort()
	select {
	case <-tun.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("aborted tunnel did not end")
	}
	took := time.Since(start)
	t.Logf("aborted after %v", took.Round(time.Millisecond))
	if took >= 5*time.Second {
		t.Fatalf("Abort took %v: the close waited on close_notify into a full socket", took)
	}
}

// TestTLSWithoutSocketWritesOnce pins the fallback for a TLS connection
// with no TLSSocket under it (issue 19 item 1): its writes cannot wake at
// probes, so a write to a client that reads nothing runs to the write
// timeout in one piece, and the tunnel then ends, instead of spinning on
// crypto/tls's final error.
func TestTLSWithoutSocketWritesOnce(t *testing.T) {
	rawClient, rawGW := tcpPair(t)
	if err := rawClient.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := rawGW.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	_, gw := tlsOver(t, rawClient, rawGW)
	gwNode, node := nodePair(t)
	counted := &countedTLS{Conn: gw.(*tls.Conn)}
	tun := New(Params{Client: counted, Node: gwNode, WriteTimeout: 500 * time.Millisecond, CloseTimeout: 500 * time.Millisecond})
	tun.Start()
	r := &tlsStreamRig{t: t, node: node}
	wait := r.stream(64, 64<<10)
	select {
	case <-tun.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("tunnel did not end")
	}
	node.Close()
	_ = wait()
	if got := tun.EndReason(); got != EndWriteTimeout {
		t.Errorf("end reason %v, want %v", got, EndWriteTimeout)
	}
	// Whole writes until the stall, then one that times out: far fewer
	// than a spin's.
	if n := counted.writes.Load(); n > 100 {
		t.Errorf("%d writes to the client: the tunnel spun on a timed-out TLS write", n)
	}
	t.Logf("%d writes to the client", counted.writes.Load())
}

// smallTLSTunnel starts a tunnel whose client is TLS over a TLSSocket,
// with 16 KiB buffers between the gateway and the client's raw socket
// (easy to fill) and a minute's write and close timeouts (far off). It
// returns the client's raw socket, the gateway's TLSSocket, and the
// tunnel.
func smallTLSTunnel(t *testing.T) (rawClient net.Conn, sock *TLSSocket, tun *Tunnel) {
	t.Helper()
	rawClient, rawGW := tcpPair(t)
	if err := rawClient.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := rawGW.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	sock = NewTLSSocket(rawGW)
	_, gw := tlsOver(t, rawClient, sock)
	gwNode, _ := tcpPair(t)
	tun = New(Params{Client: gw, Node: gwNode, WriteTimeout: time.Minute, CloseTimeout: time.Minute})
	tun.Start()
	return rawClient, sock, tun
}
