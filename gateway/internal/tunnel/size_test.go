package tunnel

import (
	"testing"
	"unsafe"
)

// TestTunnelSize pins the memory an idle tunnel holds of its own
// (docs/architecture.md quotes it): the Tunnel value fits the runtime's
// 448-byte size class. A field added to half counts twice.
func TestTunnelSize(t *testing.T) {
	if got := unsafe.Sizeof(Tunnel{}); got > 448 {
		t.Fatalf("Tunnel is %d bytes, over the 448-byte size class docs/architecture.md counts on", got)
	} else {
		t.Logf("Tunnel is %d bytes", got)
	}
}
