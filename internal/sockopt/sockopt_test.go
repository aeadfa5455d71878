package sockopt

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListenKeepAliveInherited pins what the gateway's listeners rely on:
// a connection accepted from a ListenKeepAlive listener whose
// ListenConfig sets no keepalive of its own has the listener's keepalive
// settings, those Go would have set on it.
func TestListenKeepAliveInherited(t *testing.T) {
	lc := net.ListenConfig{KeepAlive: -1, Control: ListenKeepAlive}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	raw, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
		{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
	} {
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil || gerr != nil {
			t.Fatalf("%s: %v %v", o.name, err, gerr)
		}
		if v != o.want {
			t.Errorf("accepted connection: %s = %d, want %d", o.name, v, o.want)
		}
	}
}
