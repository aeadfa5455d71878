package testproc

import (
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// CountingListener listens on host (port chosen by the kernel), closes each
// connection it accepts, and counts them; it is closed when the test ends.
func CountingListener(tb testing.TB, host string) (net.Listener, *atomic.Int32) {
	tb.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	n := new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln, n
}

// UnusedSource returns an address that is not on this host, which bind
// refuses with EADDRNOTAVAIL before any packet leaves, or skips the test
// where the kernel would bind it anyway.
func UnusedSource(tb testing.TB) string {
	tb.Helper()
	const src = "192.0.2.1" // TEST-NET-1: never routed, never configured here
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); err != nil || strings.TrimSpace(string(b)) != "0" {
		tb.Skipf("cannot tell that bind refuses a foreign address (ip_nonlocal_bind: %q %v)", b, err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		tb.Skipf("list local addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == src {
			tb.Skipf("%s is configured on this host", src)
		}
	}
	return src
}
