package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/upgrade"
	"github.com/wsgate/wsgate/internal/testproc"
)

// slowNode accepts one WebSocket handshake and answers its 101 only once
// answer is closed.
func slowNode(t *testing.T, answer <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		<-answer
		_, _ = fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			upgrade.AcceptKey([]byte(req.Header.Get("Sec-WebSocket-Key"))))
	}()
	return ln.Addr().String()
}

// TestDrainCutsHandshakeFinishedAfterTimeout pins a tunnel outliving
// Shutdown: when no tunnel was left to cut at the drain timeout, Shutdown
// returned without marking the drain as cut, and a handshake in flight
// that finished afterwards got a tunnel that was only told to go away,
// open for the close timeout past the end of Shutdown. Now the drain
// timeout cuts it at once.
func TestDrainCutsHandshakeFinishedAfterTimeout(t *testing.T) {
	answer := make(chan struct{})
	node := slowNode(t, answer)
	cfg := fmt.Sprintf("[gateway]\nlisten = %q\ndrain_window = \"10ms\"\ndrain_timeout = \"300ms\"\n[admin]\nlisten = \"\"\n"+
		"[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"relay\"\n", testproc.FreeAddr(t), node)
	srv := startWith(t, cfg, quietLog(), func(ln net.Listener) net.Listener { return ln })
	c := rawConn(t, srv.Addr().String(), "127.0.0.1")
	_, _ = c.Write([]byte("GET /room/x HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"))
	for deadline := time.Now().Add(10 * time.Second); srv.limits.Open() != 1; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the handshake's connection was never admitted")
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(answer) // the node answers after the drain timeout
	if resp := readAnswer(t, c); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake answered %d", resp.StatusCode)
	}
	deadline := time.Now().Add(2 * time.Second)
	for srv.Tunnels() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels open after Shutdown returned", srv.Tunnels())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
