package tunnel

import (
	"testing"
	"time"
)

// TestBytesAcked: bytesAcked follows what the peer acknowledged, and
// reading it allocates nothing (the poller reads it for every pinged
// client).
func TestBytesAcked(t *testing.T) {
	a, b := tcpPair(t)
	raw := rawSocket(a)
	if raw == nil {
		t.Fatal("no socket under a TCP connection")
	}
	acked := func() uint64 {
		var n uint64
		ok := false
		if err := raw.Control(func(fd uintptr) { n, ok = bytesAcked(fd) }); err != nil || !ok {
			t.Fatalf("bytesAcked: ok %v, %v", ok, err)
		}
		return n
	}
	before := acked()
	if _, err := a.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return acked() >= before+1000 })
	var fd uintptr
	_ = raw.Control(func(s uintptr) { fd = s })
	if n := testing.AllocsPerRun(100, func() { bytesAcked(fd) }); n != 0 {
		t.Errorf("bytesAcked allocates %v times a call", n)
	}
}

// TestBytesWritten: bytesWritten counts every byte handed to the socket,
// acknowledged or still queued (the keepalive places its ping by it), and
// allocates nothing.
func TestBytesWritten(t *testing.T) {
	a, _ := tcpPair(t)
	raw := rawSocket(a)
	var fd uintptr
	_ = raw.Control(func(s uintptr) { fd = s })
	written := func() uint64 {
		n, ok := bytesWritten(fd)
		if !ok {
			t.Fatal("bytesWritten failed on a TCP socket")
		}
		return n
	}
	// Both counts start at the SYN on the dialing side: positions are
	// compared with positions of the same socket only.
	before := written()
	// The peer reads nothing: most of this stays queued toward it.
	total := 0
	chunk := make([]byte, 64<<10)
	for range 64 {
		_ = a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, _ := a.Write(chunk)
		total += n
		if n < len(chunk) {
			break
		}
	}
	if n := written() - before; n != uint64(total) {
		t.Fatalf("bytesWritten grew by %d after %d bytes written", n, total)
	}
	if acked, _ := bytesAcked(fd); acked >= before+uint64(total) {
		t.Fatalf("the peer acknowledged all %d bytes: nothing was queued", total)
	}
	if n := testing.AllocsPerRun(100, func() { bytesWritten(fd) }); n != 0 {
		t.Errorf("bytesWritten allocates %v times a call", n)
	}
}
