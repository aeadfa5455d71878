package gateway

import (
	"net"
	"testing"

	"github.com/wsgate/wsgate/internal/h2spectest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestClientH2spec runs the HTTP/2 conformance suite, h2spec, against the
// gateway's TLS listener with h2 = true, requests routed to a relay: every
// case must pass, and the gateway must hold no stream afterwards.
func TestClientH2spec(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	addr := e.srv.TLSAddr().(*net.TCPAddr)
	h2spectest.Run(t, h2spectest.Options{Host: addr.IP.String(), Port: addr.Port, TLS: true})
	waitH2Zero(t, e.srv)
}
