package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// streamNode is a WebSocket node that answers every handshake and then
// streams binary frames to its client until the gateway takes nothing
// for a while; it then holds the connection, reading, until it ends.
type streamNode struct {
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	stalled int // connections whose stream the gateway stopped taking
}

func newStreamNode(t *testing.T) *streamNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &streamNode{ln: ln}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.wg.Add(1)
			go func() { defer n.wg.Done(); n.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); n.wg.Wait() })
	return n
}

func (n *streamNode) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	if req.Header.Get("Upgrade") == "" { // a health check
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		return
	}
	if _, err := c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		upgrade.AcceptKey([]byte(req.Header.Get("Sec-WebSocket-Key"))) + "\r\n\r\n")); err != nil {
		return
	}
	f := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpBinary, Length: 16 << 10})
	f = append(f, make([]byte, 16<<10)...)
	for {
		_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write(f); err != nil {
			break
		}
	}
	n.mu.Lock()
	n.stalled++
	n.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	var b [4 << 10]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
	}
}

func (n *streamNode) stalledConns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stalled
}

// openFDs is the number of the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestDrainCutsStuckWSSClients pins issue 19 item 1's drain: 200 wss
// clients that never read, their sockets full of their node's stream,
// are told to go away and cut at drain_timeout. Their writes used to spin
// on crypto/tls's final timeout until the close timeout (5 s), whatever
// the cut did to the socket, so the drain took that long; and closing a TLS
// connection could wait up to 5 s more for close_notify into the full
// socket. Now the cut ends every tunnel at once: the drain returns about
// drain_timeout after it began, long before the close timeout, let alone
// the 60 s write timeout, and goroutines and descriptors go back to where
// they were.
func TestDrainCutsStuckWSSClients(t *testing.T) {
	const clients = 200
	node := newStreamNode(t)
	f := newTLSFiles(t)
	cfg := `
[gateway]
listen = %[1]q
drain_window = "10ms"
drain_timeout = "1s"
write_timeout = "60s"
` + f.table(testproc.FreeAddr(t), "") + `
[admin]
listen = ""
[[pools]]
name = "stream"
  [[pools.nodes]]
  addr = "` + node.ln.Addr().String() + `"
[[routes]]
path_prefix = "/"
pool = "stream"
`
	e := newEnv(t, 0, cfg)
	addr := e.srv.TLSAddr().String()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)

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
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDial: smallWindow, TLSClientConfig: f.clientConfig("gw.test")}
	conns := make([]*websocket.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range clients {
		c, resp, err := d.Dial("wss://"+addr+"/stream", nil)
		if err != nil {
			status := ""
			if resp != nil {
				b, _ := io.ReadAll(resp.Body)
				status = resp.Status + " " + string(b) + " " + resp.Header.Get("Retry-After")
			}
			t.Fatalf("client %d: %v %s", i, err, status)
		}
		conns = append(conns, c) // never read
	}
	for deadline := time.Now().Add(30 * time.Second); node.stalledConns() < clients; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams stalled", node.stalledConns(), clients)
		}
	}
	if n := e.srv.Tunnels(); n != clients {
		t.Fatalf("%d of %d tunnels left once their streams stalled: stuck wss clients lost their tunnels", n, clients)
	}

	start := time.Now()
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("drain of %d stuck wss clients (drain_timeout 1s, write_timeout 60s) returned after %v", clients, took.Round(time.Millisecond))
	if n := e.srv.Tunnels(); n != 0 {
		t.Fatalf("%d tunnels after the drain", n)
	}
	// The close timeout bounds the spinning writes and the close_notify
	// wait alike: a drain that lasts it is theirs, however loaded the
	// machine.
	if took >= tunnel.DefaultCloseTimeout {
		t.Fatalf("the drain took %v with drain_timeout 1s: it waited for the close timeout (%v)", took, tunnel.DefaultCloseTimeout)
	}

	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, n := runtime.NumGoroutine(), openFDs(t)
		if g <= goroutines && n <= fds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the drain: %d goroutines (%d before the clients), %d descriptors (%d before)", g, goroutines, n, fds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
