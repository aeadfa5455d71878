package tunnel

import "testing"

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
