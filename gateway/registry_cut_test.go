package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/internal/testproc"
)

// loopPair returns both ends of one loopback TCP connection.
func loopPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestDrainCutsTunnelAddedAfterCut pins a Shutdown outliving drain_timeout:
// a handshake in flight when the drain timeout cut the tunnels registered
// its tunnel after the cut, where it was only told to go away, so a client
// that never answered kept it (and Shutdown, waiting for it) for the close
// timeout more. A tunnel added once the drain has cut is cut at once.
func TestDrainCutsTunnelAddedAfterCut(t *testing.T) {
	var r registry
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.drainAll(ctx, 0, "gateway shutting down")
	r.abortAll()

	client, _ := loopPair(t) // the peers never read nor answer
	node, _ := loopPair(t)
	hd := &hold{}
	tun := tunnel.New(tunnel.Params{Client: client, Node: node, CloseTimeout: time.Hour, Lease: hd, OnEnd: func(tun *tunnel.Tunnel) {
		r.remove(hd, tun.Stats())
	}})
	hd.t = tun
	r.add(hd)
	tun.Start()
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a tunnel added after the drain cut its tunnels is still open")
	}
	if got := tun.EndReason(); got != tunnel.EndAborted {
		t.Fatalf("end reason %v, want %v", got, tunnel.EndAborted)
	}
	if left := r.wait(context.Background()); left != 0 {
		t.Fatalf("%d tunnels left", left)
	}
}

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
			acceptKey([]byte(req.Header.Get("Sec-WebSocket-Key"))))
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
	for deadline := time.Now().Add(10 * time.Second); srv.limits.open() != 1; time.Sleep(2 * time.Millisecond) {
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

// TestDrainWaitsForReservedHandshake pins a drain that ended while a
// handshake was between its 101 and its registration: the drain's wait
// found no tunnel and the process exited under a client that had its 101,
// which saw its connection drop instead of a 1001. A reserved handshake
// keeps the wait open; its tunnel, added during the drain, is told to go
// away, and the wait ends once it has.
func TestDrainWaitsForReservedHandshake(t *testing.T) {
	var r registry
	r.reserve()
	left := make(chan int, 1)
	go func() {
		r.drainAll(context.Background(), 0, "gateway shutting down")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		left <- r.wait(ctx)
	}()
	select {
	case n := <-left:
		t.Fatalf("the drain's wait ended (%d left) with a handshake reserved", n)
	case <-time.After(200 * time.Millisecond): // long enough to see it wrongly end
	}

	client, _ := loopPair(t) // a peer that never answers the 1001
	node, _ := loopPair(t)
	hd := &hold{}
	tun := tunnel.New(tunnel.Params{Client: client, Node: node, CloseTimeout: 300 * time.Millisecond, Lease: hd,
		OnEnd: func(tun *tunnel.Tunnel) { r.remove(hd, tun.Stats()) }})
	hd.t = tun
	r.add(hd)
	tun.Start()
	r.unreserve()
	select {
	case n := <-left:
		if n != 0 {
			t.Fatalf("%d tunnels left", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the drain's wait never ended after the reserved tunnel went away")
	}
	if got := tun.Stats().GatewayToClientCode; got != tunnel.CodeGoingAway {
		t.Fatalf("client got close %d from the gateway, want %d", got, tunnel.CodeGoingAway)
	}
}
