package gateway

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// sendQueue is the number of bytes waiting in the send queue of the
// established socket at local port port and peer port peer, from
// /proc/net/tcp (-1 when there is none). An earlier connection on the same
// ports may still be listed in TIME_WAIT: only state 01 (established) counts.
func sendQueue(t *testing.T, port, peer int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		local, remote := strings.Split(f[1], ":"), strings.Split(f[2], ":")
		lp, _ := strconv.ParseInt(local[1], 16, 32)
		rp, _ := strconv.ParseInt(remote[1], 16, 32)
		if int(lp) == port && int(rp) == peer && f[3] == "01" {
			q, _ := strconv.ParseInt(strings.Split(f[4], ":")[0], 16, 64)
			return q
		}
	}
	return -1
}

// TestShutdownOutlivesStuckAdminClient pins a Shutdown that hung for
// good: the admin server wrote its answers without a write deadline, and
// Shutdown waited for every admin connection to end. An admin client
// that pipelined requests and never read the answers stalled a write,
// and with it Shutdown, forever. Admin writes now have a deadline, and
// Shutdown waits for admin connections no longer than the drain timeout.
func TestShutdownOutlivesStuckAdminClient(t *testing.T) {
	cfg := fmt.Sprintf("[gateway]\nlisten = %q\ndrain_window = \"10ms\"\ndrain_timeout = \"300ms\"\n[admin]\nlisten = \"127.0.0.1:0\"\n"+
		"[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"relay\"\n", testproc.FreeAddr(t), testproc.FreeAddr(t))
	srv := startWith(t, cfg, quietLog(), func(ln net.Listener) net.Listener { return ln })
	c, err := net.Dial("tcp", srv.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	reqs := []byte(strings.Repeat("GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n", 100000))
	go func() {
		_ = c.SetWriteDeadline(time.Now().Add(90 * time.Second))
		_, _ = c.Write(reqs) // never reads an answer
	}()
	adminPort := srv.AdminAddr().(*net.TCPAddr).Port
	clientPort := c.LocalAddr().(*net.TCPAddr).Port
	// The admin server's write is stuck once its send queue holds bytes
	// that do not move. Should the test not see that within the bound
	// (reading /proc/net/tcp is slow on a machine holding tens of thousands
	// of sockets for other tests), Shutdown is still called with the
	// client writing and never reading, and must still return.
	deadline := time.Now().Add(8 * time.Second)
	for still, last := 0, int64(-1); still < 20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Logf("no stalled admin write seen within 8s (last send queue %d bytes, %d samples alike); shutting down anyway", last, still)
			break
		}
		q := sendQueue(t, adminPort, clientPort)
		if q > 0 && q == last {
			still++
		} else {
			still = 0
		}
		last = q
	}
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		c.Close() // let the stuck Shutdown go
		t.Fatal("Shutdown still waiting on an admin client that never reads")
	}
}
