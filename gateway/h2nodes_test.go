package gateway

import (
	"net"
	"os"
	"testing"

	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// idleConn is a PolledConn that reads nothing: it takes a poller's turn.
type idleConn struct{}

func (idleConn) PollRead(int, bool) (bool, bool) { return true, false }
func (idleConn) PollDetached(error)              {}

// TestH2ConnsOnDistinctPollers pins that a node's h2_connections are read
// by distinct pollers, so that its clients' tunnels spread over the cores:
// another connection takes the pollers' turn between the node's two, as a
// tunnel to another pool's node would. Before, the node's connections took
// the global turn, and with two pollers both landed on one.
func TestH2ConnsOnDistinctPollers(t *testing.T) {
	if os.Getenv("WSGATE_TUNNEL_ENGINE") == "goroutines" {
		t.Skip("no pollers on the goroutine engine")
	}
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_connections = 2", addr))
	first := e.mustDial("/ws")
	echoOnce(t, first, "one")
	if tunnel.Pollers() < 2 {
		t.Skipf("%d poller", tunnel.Pollers())
	}
	// Another connection takes a turn.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if owner, detach := tunnel.AttachConn(other, idleConn{}); owner != nil {
		defer detach()
	}
	second := e.mustDial("/ws")
	echoOnce(t, second, "two")
	if st := e.h2Set(addr).Stats(); st.Conns != 2 || st.Polled != 2 || st.Pollers != 2 {
		t.Errorf("set %+v, want 2 connections read by 2 pollers", st)
	}
	first.Close()
	second.Close()
	e.waitZero()
}
