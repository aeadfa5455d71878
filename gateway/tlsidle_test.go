package gateway

import (
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestIdleWSSHeapProfile writes a heap profile, every allocation sampled,
// of a gateway holding idle wss tunnels (TLS 1.3, on the pollers), for
// `go tool pprof -sample_index=inuse_space`: what each byte an idle wss
// tunnel holds is (docs/architecture.md). A measurement, not a check: it
// runs only when WSGATE_WSS_IDLE_PROFILE names the file, e.g.
//
//	WSGATE_WSS_IDLE_PROFILE=/tmp/wss.pprof WSGATE_WSS_IDLE_N=300 \
//	  go test -run TestIdleWSSHeapProfile -v ./gateway
//
// The clients (crypto/tls client connections, the relay's side) are in the
// process too: the profile tells the gateway's objects by where they were
// allocated (edge, tunnel, tlsrecord, crypto/tls.Server).
func TestIdleWSSHeapProfile(t *testing.T) {
	path := os.Getenv("WSGATE_WSS_IDLE_PROFILE")
	if path == "" {
		t.Skip("set WSGATE_WSS_IDLE_PROFILE=FILE to profile idle wss tunnels")
	}
	n, _ := strconv.Atoi(os.Getenv("WSGATE_WSS_IDLE_N"))
	if n <= 0 {
		n = 300
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), ""), catchAll))
	addr := e.srv.TLSAddr().String()
	var conns []*rawWSS
	for i := range n {
		conns = append(conns, dialRawWSS(t, addr, "/room/idle"+strconv.Itoa(i%50)+"?hello=1", f.clientConfig("gw.test")))
	}
	time.Sleep(time.Second)
	runtime.GC()
	runtime.GC()
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d idle wss tunnels; profile in %s", len(conns), path)
}
