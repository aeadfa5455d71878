package testproc

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// bindExclusive binds a socket without SO_REUSEADDR to addr, as an
// outgoing connection's source port or another process's pick would, and
// closes it.
func bindExclusive(t *testing.T, addr string) error {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("FreeAddr returned %q", addr)
	}
	port, _ := strconv.Atoi(p)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
}

// TestFreeAddrReserves pins issue 19 item 14: FreeAddr closed the port it
// had found free, so until the caller's process listened the kernel could
// give it to any connection as its source port (with the ephemeral range
// at "1024 65535", TestRestartAfterListenChange failed with "address
// already in use"). Now the port stays reserved until the test ends: no
// other socket can bind it, a listener with SO_REUSEADDR (every Go
// listener) can.
func TestFreeAddrReserves(t *testing.T) {
	var addr string
	t.Run("held", func(t *testing.T) {
		addr = FreeAddr(t)
		if err := bindExclusive(t, addr); !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("another socket could bind %s (%v): the port is not reserved", addr, err)
		}
		seen := map[string]bool{addr: true}
		for range 20 {
			a := FreeAddr(t)
			if seen[a] {
				t.Fatalf("FreeAddr returned %s twice", a)
			}
			seen[a] = true
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("a listener cannot open the reserved %s: %v", addr, err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	})
	// The reservation ends with the test (the accepted connection's
	// socket may hold the port a moment longer, until its close completes).
	var err error
	for range 200 {
		if err = bindExclusive(t, addr); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s still held after the test: %v", addr, err)
}
