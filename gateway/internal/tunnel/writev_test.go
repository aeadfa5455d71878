//go:build linux

package tunnel

import (
	"io"
	"net"
	"syscall"
	"testing"
)

// TestWritevTakesEverySegment writes as many segments as one forward may
// queue (a carried header, a run, a ping, a run, a close) in one writev: a
// vector shorter than that would panic the poller.
func TestWritevTakesEverySegment(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Skip("no epoll:", err)
	}
	defer p.epfile.Close()
	a, b := tcpPair(t)
	raw, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var segs [][]byte
	var want []byte
	for i := range outSegs {
		s := []byte{byte('a' + i), byte('a' + i)}
		segs = append(segs, s)
		want = append(want, s...)
	}
	var n int
	var werr error
	if err := raw.Write(func(fd uintptr) bool {
		n, werr = p.writev(int(fd), segs)
		return werr != syscall.EAGAIN
	}); err != nil || werr != nil || n != len(want) {
		t.Fatalf("writev: %d bytes, %v %v; want %d", n, err, werr, len(want))
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(b, got); err != nil || string(got) != string(want) {
		t.Fatalf("read %q (%v), want %q", got, err, want)
	}
}
