package discover

import (
	"net/netip"
	"testing"
)

// TestReachesOwn pins which node addresses are this gateway's listeners.
func TestReachesOwn(t *testing.T) {
	own := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("0.0.0.0:9090"), netip.MustParseAddrPort("[::]:9443")}
	local := func() []netip.Addr {
		return []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":         true,
		"127.0.0.2:8080":         false, // another loopback address: another listener
		"10.0.0.5:8080":          false,
		"10.0.0.5:9090":          true, // bound to every address
		"127.0.0.9:9090":         true,
		"[::ffff:10.0.0.5]:9090": true,
		"[fd00::5]:9443":         true,
		"10.0.0.6:9090":          false, // another host
		"relay-0.relay:9090":     false, // a name is not resolved
		"10.0.0.5:7001":          false,
	} {
		if got := reachesOwn(addr, own, local); got != want {
			t.Errorf("reachesOwn(%q) = %v, want %v", addr, got, want)
		}
	}
}
