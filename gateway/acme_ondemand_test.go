package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// strangerFlood makes TLS handshakes to addr for ever new names, one after
// the other (at most 20000), until stop is called: each costs an
// on_demand_rate token when one is left.
func strangerFlood(addr string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 20000 {
			select {
			case <-done:
				return
			default:
			}
			_, _ = handshakeLeaf(addr, fmt.Sprintf("junk%d.example.org", i))
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// TestACMEOnDemandApprovedNamesOutlastStrangers pins the on_demand_rate
// bucket to the ask calls it is there to limit. certmagic asks the
// decision before it loads a name's certificate from the storage and
// before it renews one at a handshake; the bucket was charged each time,
// so a stranger's flood of names, keeping it empty, made an approved
// name's renewal fail (and certmagic drop its certificate) and, after a
// restart, its stored certificate unreachable. Now an approval is
// remembered (the renewal asks nothing) and a name whose certificate is
// in the storage is asked about without a token.
func TestACMEOnDemandApprovedNamesOutlastStrangers(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, ports, 6*time.Second)
	// certmagic keeps a failed renewal's backoff per name for the
	// process: a name of its own for each run of the test.
	name := fmt.Sprintf("paying%d.acme.test", renewRuns.Add(1))
	var asked atomic.Int32 // about name
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("domain") != name {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		asked.Add(1)
	}))
	defer ask.Close()
	table += fmt.Sprintf("  storage = %q\n  on_demand = true\n  ask = %q\n  on_demand_rate = 1\n  on_demand_burst = 2\n", t.TempDir(), ask.URL)
	cfg := acmeGatewayConfig(ports, table, "")
	a := newEnv(t, 1, cfg)
	addr := a.srv.TLSAddr().String()
	first := waitACMELeaf(t, addr, name)
	if n := asked.Load(); n != 1 {
		t.Fatalf("ask calls about %s to obtain it: %d, want 1", name, n)
	}

	stop := strangerFlood(addr)
	defer stop()
	waitUntilWithin(t, 10*time.Second, func() bool { return counterSum(t, a.srv.acme.onDemand, "rate") >= 1 })
	// The certificate lives 6s: a handshake after 2/3 of that renews it.
	waitUntilWithin(t, 30*time.Second, func() bool {
		leaf, err := handshakeLeaf(addr, name)
		if err != nil {
			t.Fatalf("handshake for the approved %s while strangers empty the bucket: %v", name, err)
		}
		return leaf.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	if n := asked.Load(); n != 1 {
		t.Errorf("ask calls about %s after its renewal: %d, want still 1 (the approval remembered)", name, n)
	}

	// A restart, the certificate in the storage: the new gateway binds
	// its ports (reuse_port) before the old one leaves them, or another
	// socket of the test's (a relay's, bound to port 0) could take one.
	stop()
	b := newEnv(t, 1, cfg)
	_ = a.srv.Shutdown(context.Background())
	stop = strangerFlood(addr)
	defer stop()
	waitUntilWithin(t, 10*time.Second, func() bool { return counterSum(t, b.srv.acme.onDemand, "rate") >= 1 })
	for i := range 5 {
		if _, err := handshakeLeaf(addr, name); err != nil {
			t.Fatalf("after a restart, handshake %d for the approved, stored %s while strangers empty the bucket: %v", i, name, err)
		}
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("ask calls about %s: %d, want 2 (once more after the restart)", name, n)
	}
	stop()
	t.Logf("strangers' names refused by the rate: %v before the restart, %v after",
		counterSum(t, a.srv.acme.onDemand, "rate"), counterSum(t, b.srv.acme.onDemand, "rate"))
}
