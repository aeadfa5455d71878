package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/health"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestLocalDialErrorKeepsNodeUp pins that a handshake whose dial fails on
// the gateway's side does not charge the node (it did: ReportFailure on
// every dial error, so a gateway out of ports or descriptors ejected
// healthy nodes): the node stays up with no passive failure, the failure
// is counted in wsgate_upstream_local_dial_errors_total, and the client
// gets 503 with Retry-After. With a second source address that works,
// the handshake goes through.
func TestLocalDialErrorKeepsNodeUp(t *testing.T) {
	src := testproc.UnusedSource(t)
	pool := fmt.Sprintf("source_addrs = [%q]\nconnect_tries = 3\n  [pools.health]\n  eject_after = 1", src)
	e := newEnv(t, 1, oneNodeWith("", pool, ""))
	for range 3 {
		_, resp, err := e.dial("/room/x", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("want 503 with Retry-After, got %v %+v", err, resp)
		}
	}
	p := e.srv.current().pools["relay"]
	st, _ := p.Health.Status(e.addrs[0])
	if st.State.String() != "up" || st.PassiveFailures != 0 {
		t.Fatalf("node %s is %s with %d passive failures, want up with none", e.addrs[0], st.State, st.PassiveFailures)
	}
	var m dto.Metric
	if err := e.srv.metrics.LocalDialErrors.WithLabelValues("relay", e.addrs[0], health.ReasonNoSourceAddr).Write(&m); err != nil {
		t.Fatal(err)
	}
	if v := m.GetCounter().GetValue(); v != 3 {
		t.Fatalf("wsgate_upstream_local_dial_errors_total{reason=%q} = %v, want 3", health.ReasonNoSourceAddr, v)
	}
	if v := e.srv.metrics.HandshakeCounts()["local_dial_error"]; v != 3 {
		t.Fatalf("local_dial_error handshakes = %d, want 3", v)
	}
	e.waitZero()

	pool = fmt.Sprintf("source_addrs = [%q, \"127.0.0.2\"]\n  [pools.health]\n  eject_after = 1", src)
	e = newEnv(t, 1, oneNodeWith("", pool, ""))
	for range 2 { // one handshake starts at each source
		c := e.mustDial("/room/x")
		c.Close()
	}
	st, _ = e.srv.current().pools["relay"].Health.Status(e.addrs[0])
	if st.State.String() != "up" || st.PassiveFailures != 0 {
		t.Fatalf("node %s is %s with %d passive failures, want up with none", e.addrs[0], st.State, st.PassiveFailures)
	}
	e.waitZero()
}

// TestOutOfDescriptorsStopsAtOnce pins that a handshake whose dial fails
// for want of descriptors (EMFILE, injected at the dialer) is answered 503
// with Retry-After after that one dial: no other node would fare better,
// so none is tried, and no node is charged with it.
func TestOutOfDescriptorsStopsAtOnce(t *testing.T) {
	a, _ := testproc.CountingListener(t, "127.0.0.1")
	b, _ := testproc.CountingListener(t, "127.0.0.1")
	cfg, err := conf.Parse("test.toml", []byte(fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
[admin]
listen = ""
[[pools]]
name = "relay"
connect_tries = 3
  [pools.health]
  eject_after = 1
  [[pools.nodes]]
  addr = %q
  [[pools.nodes]]
  addr = %q
[[routes]]
pool = "relay"
`, a.Addr().String(), b.Addr().String())))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	p := srv.current().pools["relay"]
	p.Dialer.DialOne = func(*net.Dialer, string) (net.Conn, error) { // set before Start: no dial yet
		calls.Add(1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	e := &env{t: t, srv: srv, gw: srv.Addr().String()}
	_, resp, err := e.dial("/room/x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("want 503 with Retry-After, got %v %+v", err, resp)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d dials, want 1 (no other node tried when out of descriptors)", n)
	}
	var total float64
	for _, addr := range []string{a.Addr().String(), b.Addr().String()} {
		st, _ := p.Health.Status(addr)
		if st.State.String() != "up" || st.PassiveFailures != 0 {
			t.Fatalf("node %s is %s with %d passive failures, want up with none", addr, st.State, st.PassiveFailures)
		}
		var m dto.Metric
		if err := srv.metrics.LocalDialErrors.WithLabelValues("relay", addr, health.ReasonNoDescriptors).Write(&m); err != nil {
			t.Fatal(err)
		}
		total += m.GetCounter().GetValue()
	}
	if total != 1 {
		t.Fatalf("wsgate_upstream_local_dial_errors_total{reason=%q} = %v over both nodes, want 1", health.ReasonNoDescriptors, total)
	}
}
