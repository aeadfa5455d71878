package upstream

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
)

// TestKeptH2SetDialsThroughNewPool pins that an h2 set a reload keeps
// (its HTTP/2 settings unchanged) dials its next connection as the new
// pool does: from the new source_addrs, with the new connect_timeout.
// Before, its dial was bound to the pool it was made for, and no reload
// reached it.
func TestKeptH2SetDialsThroughNewPool(t *testing.T) {
	node := newNodeListener(t)
	reg := balancer.NewRegistry()
	build := func(old *Pool, source string, timeout time.Duration) *Pool {
		src := fmt.Sprintf("[[pools]]\nname = \"relay\"\nprotocol = \"h2\"\nsource_addrs = [%q]\nconnect_timeout = %q\n  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"relay\"\n",
			source, timeout, node.addr())
		cfg, err := conf.Parse("test.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p, _, _, err := NewPool(&cfg.Pools[0], nil, old, reg, quietLog(), nil, func(int, int) Admission { return nil })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Health.Stop)
		p.OpenH2(old, 1, h2.Config{}, nil, 0)
		return p
	}
	var mu sync.Mutex
	var timeouts []time.Duration
	record := func(p *Pool) {
		p.Dialer.DialOne = func(nd *net.Dialer, addr string) (net.Conn, error) {
			mu.Lock()
			timeouts = append(timeouts, nd.Timeout)
			mu.Unlock()
			return nd.Dial("tcp", addr)
		}
	}
	open := func(s *h2.Set) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The node closes every connection: the open fails once dialed.
		if _, _, err := s.Open(ctx, &h2.Request{Authority: "n", Path: "/"}); err == nil {
			t.Fatal("open succeeded against a node that closes")
		}
	}
	a := build(nil, "127.0.0.2", 3*time.Second)
	record(a)
	n := a.Balancer.Nodes()[0]
	set := a.H2[n]
	open(set)
	if from := node.from(t); from != "127.0.0.2" {
		t.Fatalf("first dial from %s, want 127.0.0.2", from)
	}
	b := build(a, "127.0.0.3", 4*time.Second)
	record(b)
	if b.H2[n] != set {
		t.Fatal("the reload did not keep the set")
	}
	a.RetireH2(b)
	open(set)
	if from := node.from(t); from != "127.0.0.3" {
		t.Errorf("dial after the reload from %s, want the new source_addrs' 127.0.0.3", from)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(timeouts) != 2 || timeouts[0] != 3*time.Second || timeouts[1] != 4*time.Second {
		t.Errorf("dial timeouts %v, want [3s 4s]: the reload's connect_timeout", timeouts)
	}
}
