package gateway

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// TestWriteTimeoutClosesStuckReader pins the gateway side of the stuck
// reader fix: a client that joins a busy room with a small receive window
// and never reads is closed once it has taken no byte for write_timeout,
// the close is counted in wsgate_tunnels_closed_total{reason="write_timeout"},
// and scrapes answer all along. Before, the tunnel lived on, blocked in a
// write with no deadline, and the first scrape hung behind it.
func TestWriteTimeoutClosesStuckReader(t *testing.T) {
	e := newEnv(t, 1, withAdminListen(oneNodeWith(`write_timeout = "300ms"`, "", "")))
	if v := counter(e.scrape(), "wsgate_tunnels_closed_total", "reason", "write_timeout"); v != 0 {
		t.Fatalf("write_timeout closes before the test: %v, want 0", v)
	}
	smallWindow := func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
			}); err != nil {
				return err
			}
			return serr
		}}
		return d.Dial(network, addr)
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDial: smallWindow}
	stuck, _, err := d.Dial("ws://"+e.gw+"/room/busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close() // never read
	pub := e.mustDial("/room/busy")
	defer pub.Close()
	msg := make([]byte, 60<<10)
	for i := range 100 {
		_ = pub.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := pub.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	waitUntil(t, func() bool {
		return counter(e.scrape(), "wsgate_tunnels_closed_total", "reason", "write_timeout") == 1
	})
}
