package upstream

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// linkLocal returns a link-local IPv6 address of one of the host's
// interfaces, with its zone, or skips the test when there is none.
func linkLocal(t *testing.T) netip.Addr {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skip(err)
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			pfx, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(pfx.IP)
			if ok && ip.Is6() && ip.IsLinkLocalUnicast() {
				return ip.WithZone(ifi.Name)
			}
		}
	}
	t.Skip("no link-local IPv6 address on this host")
	return netip.Addr{}
}

// TestDialSocketZone pins a node at a link-local IPv6 address with its
// zone ("[fe80::1%eth0]:8080"), which Dial connects to: DialSocket
// connects there too, or declines so that Dial does. Regression: sockaddr dropped the zone, so the
// connect failed with EINVAL and the node was charged with the failure.
func TestDialSocketZone(t *testing.T) {
	ip := linkLocal(t)
	ln, err := net.Listen("tcp6", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	addr := netip.AddrPortFrom(ip, uint16(ln.Addr().(*net.TCPAddr).Port)).String()
	d, err := newDialer("p", nil, 2*time.Second, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial(addr)
	if err != nil {
		t.Fatalf("Dial %s: %v", addr, err)
	}
	_ = c.Close()
	fd, _, err := d.DialSocket(addr)
	if errors.Is(err, ErrNoSocketDial) {
		return // left to Dial, which connects
	}
	if err != nil {
		t.Fatalf("DialSocket %s: %v (Dial connects)", addr, err)
	}
	defer unix.Close(fd)
	if err := connected(t, fd); err != nil {
		t.Fatalf("DialSocket %s: connect: %v", addr, err)
	}
}
