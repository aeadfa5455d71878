package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestMain runs the package's tests on the goroutine engine instead of the
// event-driven one when WSGATE_TUNNEL_ENGINE=goroutines, and with TLS
// clients (on goroutines too) when WSGATE_TUNNEL_TLS=1 (see clientPair);
// make test runs all three.
func TestMain(m *testing.M) {
	if os.Getenv("WSGATE_TUNNEL_ENGINE") == "goroutines" {
		testEngine = EngineGoroutines
	}
	os.Exit(m.Run())
}

// TestEngineChoice pins which engine runs a tunnel: the event-driven one
// for two TCP sockets (unless the suite runs on goroutines or its clients
// over TLS), goroutines for
// a connection without a socket and when asked for.
func TestEngineChoice(t *testing.T) {
	wantTCP := "epoll"
	switch {
	case testEngine == EngineGoroutines:
		wantTCP = "goroutines"
	case testTLS:
		wantTCP = EngineNameTLS
	}
	_, gwClient := clientPair(t)
	gwNode, _ := tcpPair(t)
	if got := engineOf(t, Params{Client: gwClient, Node: gwNode}); got != wantTCP {
		t.Errorf("TCP client and node: engine %q, want %q", got, wantTCP)
	}
	_, gwClient = clientPair(t)
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
	_, gwClient := clientPair(t)
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

// TestFloodDoesNotStarvePoller keeps one client sending as fast as its node
// reads while, on tunnels started after it (at least one of them on the
// same poller), clients and nodes exchange frames: every exchange
// completes. A poller reads one source at most readBudget times before it
// turns to the others; whether a run gets that far depends on the
// machine's timing (the node may fall behind first), so this is a liveness
// check around the budget rather than a trigger of it.
func TestFloodDoesNotStarvePoller(t *testing.T) {
	flood := newRig(t, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the flooding client: 64 KB frames, without pause
		defer wg.Done()
		f := frame(wsframe.OpBinary, true, true, make([]byte, 64<<10))
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = flood.client.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := flood.client.Write(f); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	go func() { // its node reads everything
		defer wg.Done()
		_, _ = io.Copy(io.Discard, flood.node)
	}()
	t.Cleanup(func() { close(stop); flood.client.Close(); flood.node.Close(); wg.Wait() })
	for deadline := time.Now().Add(10 * time.Second); flood.tun.Stats().BytesToNode == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the flood never went through")
		}
		time.Sleep(time.Millisecond)
	}

	for i := range runtime.GOMAXPROCS(0) + 1 {
		r := newRig(t, 0)
		for j := range 20 {
			r.write(r.client, frame(wsframe.OpText, true, true, []byte("ping")))
			if h, _ := readFrame(t, r.node, r.nr); h.Op != wsframe.OpText {
				t.Fatalf("tunnel %d, exchange %d: node got %v", i, j, h.Op)
			}
			r.write(r.node, frame(wsframe.OpText, true, false, []byte("pong")))
			if h, _ := readFrame(t, r.client, r.cr); h.Op != wsframe.OpText {
				t.Fatalf("tunnel %d, exchange %d: client got %v", i, j, h.Op)
			}
		}
	}
}
