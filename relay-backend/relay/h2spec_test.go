package relay_test

import (
	"net"
	"testing"

	"github.com/wsgate/wsgate/internal/h2spectest"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// TestH2spec runs the HTTP/2 conformance suite, h2spec, against the
// relay's listener as cleartext HTTP/2 with prior knowledge (h2c): every
// case must pass.
func TestH2spec(t *testing.T) {
	s := startRelay(t, relay.Options{})
	addr, err := net.ResolveTCPAddr("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	h2spectest.Run(t, h2spectest.Options{Host: addr.IP.String(), Port: addr.Port})
	waitIdle(t, s)
}
