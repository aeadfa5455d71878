package rawio

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadWrite passes bytes through a non-blocking socket pair: a read of
// an empty socket is EAGAIN, not a block, and a write goes whole.
func TestReadWrite(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	b := make([]byte, 8)
	if _, err := Read(fds[1], b); err != unix.EAGAIN {
		t.Fatalf("read of an empty socket: %v, want EAGAIN", err)
	}
	if n, err := Write(fds[0], []byte("frame")); n != 5 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	if n, err := Write(fds[0], nil); n != 0 || err != nil {
		t.Fatalf("empty write: %d, %v", n, err)
	}
	if n, err := Read(fds[1], b); n != 5 || err != nil || string(b[:n]) != "frame" {
		t.Fatalf("read: %d %q, %v", n, b[:n], err)
	}
	unix.Close(fds[0])
	if n, err := Read(fds[1], b); n != 0 || err != nil {
		t.Fatalf("read after the peer closed: %d, %v, want 0 (end of stream)", n, err)
	}
}
