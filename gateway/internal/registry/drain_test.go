package registry

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// loopPair returns both ends of one loopback TCP connection.
func loopPair(t testing.TB) (net.Conn, net.Conn) {
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
	var r Tunnels
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.DrainAll(ctx, 0, "gateway shutting down")
	r.AbortAll()

	client, _ := loopPair(t) // the peers never read nor answer
	node, _ := loopPair(t)
	hd := &Entry{}
	tun := tunnel.New(tunnel.Params{Client: client, Node: node, CloseTimeout: time.Hour, Lease: hd, OnEnd: func(tun *tunnel.Tunnel) {
		r.Remove(hd)
	}})
	hd.SetTunnel(tun)
	r.Add(hd)
	tun.Start()
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a tunnel added after the drain cut its tunnels is still open")
	}
	if got := tun.EndReason(); got != tunnel.EndAborted {
		t.Fatalf("end reason %v, want %v", got, tunnel.EndAborted)
	}
	if left := r.Wait(context.Background()); left != 0 {
		t.Fatalf("%d tunnels left", left)
	}
}

// TestDrainWaitsForReservedHandshake pins a drain that ended while a
// handshake was between its 101 and its registration: the drain's wait
// found no tunnel and the process exited under a client that had its 101,
// which saw its connection drop instead of a 1001. A reserved handshake
// keeps the wait open; its tunnel, added during the drain, is told to go
// away, and the wait ends once it has.
func TestDrainWaitsForReservedHandshake(t *testing.T) {
	var r Tunnels
	r.Reserve()
	left := make(chan int, 1)
	go func() {
		r.DrainAll(context.Background(), 0, "gateway shutting down")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		left <- r.Wait(ctx)
	}()
	select {
	case n := <-left:
		t.Fatalf("the drain's wait ended (%d left) with a handshake reserved", n)
	case <-time.After(200 * time.Millisecond): // long enough to see it wrongly end
	}

	client, _ := loopPair(t) // a peer that never answers the 1001
	node, _ := loopPair(t)
	hd := &Entry{}
	tun := tunnel.New(tunnel.Params{Client: client, Node: node, CloseTimeout: 300 * time.Millisecond, Lease: hd,
		OnEnd: func(tun *tunnel.Tunnel) { r.Remove(hd) }})
	hd.SetTunnel(tun)
	r.Add(hd)
	tun.Start()
	r.Unreserve()
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
