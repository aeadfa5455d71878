package tunnel

import (
	"crypto/tls"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/tlsrecord"
)

// TestIdleTLSTunnelHeap measures the heap an idle TLS 1.3 client's tunnel
// holds on the poller, and writes a heap profile of it with every
// allocation sampled, for `go tool pprof -sample_index=inuse_space`
// (docs/architecture.md quotes it). It is a measurement, not a check: it
// runs only when WSGATE_TLS_IDLE_PROFILE names the profile's file, e.g.
//
//	WSGATE_TLS_IDLE_PROFILE=/tmp/tlsidle.pprof WSGATE_TLS_IDLE_N=500 \
//	  go test -run TestIdleTLSTunnelHeap -v ./gateway/internal/tunnel
//
// The test's clients (crypto/tls client connections) are in the same
// process: the profile tells the gateway's side by its allocation sites.
func TestIdleTLSTunnelHeap(t *testing.T) {
	path := os.Getenv("WSGATE_TLS_IDLE_PROFILE")
	if path == "" {
		t.Skip("set WSGATE_TLS_IDLE_PROFILE=FILE to profile idle TLS tunnels")
	}
	if testEngine == EngineGoroutines {
		t.Skip("the event-driven engine's")
	}
	n, _ := strconv.Atoi(os.Getenv("WSGATE_TLS_IDLE_N"))
	if n <= 0 {
		n = 500
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	conf := tlsrecord.ServerConfig(testServerConfig(t))
	var clients []*tls.Conn
	var tuns []*Tunnel
	defer func() {
		for _, c := range clients {
			c.Close()
		}
		for _, tun := range tuns {
			tun.Abort()
		}
	}()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		rawClient, rawGW := tcpPair(t)
		gwNode, _ := tcpPair(t)
		sock := NewTLSSocket(rawGW)
		capture := tlsrecord.NewCapture(sock)
		cc := tls.Client(rawClient, &tls.Config{InsecureSkipVerify: true, ServerName: "gateway.test"})
		sc := tls.Server(capture, conf)
		done := make(chan error, 1)
		go func() { done <- sc.Handshake() }()
		_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := cc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		s, err := capture.Take(sc.ConnectionState())
		if err != nil {
			t.Fatal(err)
		}
		tun := New(Params{Client: NewRecordConn(sock, sc.ConnectionState(), s), Node: gwNode})
		tun.Start()
		if tun.Engine() != EngineNameTLS {
			t.Fatalf("engine %s", tun.Engine())
		}
		clients, tuns = append(clients, cc), append(tuns, tun)
	}
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d idle TLS tunnels (clients in the process too): heap %d -> %d bytes, %.0f bytes per tunnel and client",
		n, before.HeapAlloc, after.HeapAlloc, float64(after.HeapAlloc-before.HeapAlloc)/float64(n))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}
