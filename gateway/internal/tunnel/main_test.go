package tunnel

import (
	"net"
	"os"
	"testing"
	"time"
)

// TestMain runs the package's tests on the goroutine engine instead of the
// event-driven one when WSGATE_TUNNEL_ENGINE=goroutines (make test runs
// both).
func TestMain(m *testing.M) {
	if os.Getenv("WSGATE_TUNNEL_ENGINE") == "goroutines" {
		testEngine = EngineGoroutines
	}
	os.Exit(m.Run())
}

// TestEngineChoice pins which engine runs a tunnel: the event-driven one
// for two TCP sockets (unless the suite runs on goroutines), goroutines for
// a connection without a socket and when asked for.
func TestEngineChoice(t *testing.T) {
	wantTCP := "epoll"
	if testEngine == EngineGoroutines {
		wantTCP = "goroutines"
	}
	_, gwClient := tcpPair(t)
	gwNode, _ := tcpPair(t)
	if got := engineOf(t, Params{Client: gwClient, Node: gwNode}); got != wantTCP {
		t.Errorf("TCP client and node: engine %q, want %q", got, wantTCP)
	}
	_, gwClient = tcpPair(t)
	gwNode, _ = tcpPair(t)
	if got := engineOf(t, Params{Client: gwClient, Node: gwNode, Engine: EngineGoroutines}); got != "goroutines" {
		t.Errorf("Engine: EngineGoroutines: engine %q", got)
	}
	pipeClient, pipeGW := net.Pipe()
	t.Cleanup(func() { pipeClient.Close(); pipeGW.Close() })
	gwNode, _ = tcpPair(t)
	if got := engineOf(t, Params{Client: pipeGW, Node: gwNode}); got != "goroutines" {
		t.Errorf("a client without a socket: engine %q", got)
	}
}

// engineOf starts a tunnel with p, ends it and returns its engine.
func engineOf(t *testing.T, p Params) string {
	t.Helper()
	tun := New(p)
	tun.Start()
	tun.Abort()
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("aborted tunnel did not end")
	}
	return tun.Engine()
}

// TestAbortBeforeStart pins a tunnel aborted before it started (a drain
// that had cut every tunnel when a late handshake registered this one):
// it ends, releases its lease once, and Start afterwards touches nothing.
func TestAbortBeforeStart(t *testing.T) {
	_, gwClient := tcpPair(t)
	gwNode, _ := tcpPair(t)
	lease := &countingLease{}
	tun := New(Params{Client: gwClient, Node: gwNode, Lease: lease, CloseTimeout: time.Hour})
	tun.Abort()
	tun.Start()
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a tunnel aborted before Start never ended")
	}
	if got := tun.EndReason(); got != EndAborted {
		t.Errorf("end reason %v, want %v", got, EndAborted)
	}
	if n := lease.n.Load(); n != 1 {
		t.Errorf("lease released %d times, want 1", n)
	}
}
