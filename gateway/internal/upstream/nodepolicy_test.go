package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/discovery"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/sys/unix"
)

// TestNodePolicy pins which node addresses a discovered pool refuses,
// with and without pools.discovery.allow, and why.
func TestNodePolicy(t *testing.T) {
	open := NewNodePolicy(conf.Discovery{Kind: "redis"})
	allow := NewNodePolicy(conf.Discovery{Kind: "redis", Allow: []string{"10.0.0.0/8", "127.0.0.1", "fd00::/8"}})
	for _, c := range []struct {
		addr            string
		without, within string // the reason refused without allow, with allow; "" = taken
	}{
		{"10.1.2.3:7001", "", ""},
		{"127.0.0.1:7001", "", ""},
		{"127.0.0.2:7001", "", whyNotAllow},
		{"192.168.1.5:7001", "", whyNotAllow},
		{"[fd00::5]:7001", "", ""},
		{"[fd00:ec2::254]:80", "", ""}, // a metadata service at an ordinary address: only allow keeps it out
		{"100.100.100.200:80", "", whyNotAllow},
		{"[2001:db8::1]:7001", "", whyNotAllow},
		{"[::ffff:10.1.2.3]:7001", "", ""}, // IPv4-mapped, unmapped
		{"[::ffff:169.254.169.254]:80", whyNever, whyNever},
		{"169.254.169.254:80", whyNever, whyNever},      // a cloud's metadata service
		{"[64:ff9b::a9fe:a9fe]:80", whyNever, whyNever}, // 169.254.169.254 through NAT64
		{"[64:ff9b::a01:203]:7001", "", whyNotAllow},    // 10.1.2.3 through NAT64: not itself in allow
		{"[fe80::1]:7001", whyNever, whyNever},
		{"[fe80::1%eth0]:7001", whyZone, whyZone},
		{"[fd00::5%lo]:7001", whyZone, whyZone},
		{"[::%lo]:7001", whyZone, whyZone}, // connects to ::1: no zone passes
		{"0.0.0.0:7001", whyNever, whyNever},
		{"[::]:7001", whyNever, whyNever},
		{"224.0.0.1:7001", whyNever, whyNever},
		{"[ff02::1]:7001", whyNever, whyNever},
		{"255.255.255.255:7001", whyNever, whyNever},
		{"relay-0.relay:7001", "", ""}, // a host name: checked when dialed, on its address
	} {
		for _, k := range []struct {
			p    *NodePolicy
			want string
		}{{open, c.without}, {allow, c.within}} {
			err := k.p.checkNode(c.addr)
			var re *refusedAddrError
			switch {
			case k.want == "" && err != nil:
				t.Errorf("%s (allow %v): refused: %v", c.addr, k.p.allow, err)
			case k.want != "" && (!errors.As(err, &re) || re.why != k.want):
				t.Errorf("%s (allow %v): got %v, want refused: %s", c.addr, k.p.allow, err, k.want)
			}
		}
	}
	if p := NewNodePolicy(conf.Discovery{}); p != nil || p.checkNode("169.254.169.254:80") != nil || p.addrCheck() != nil {
		t.Fatal("a pool without discovery is held to a policy")
	}
}

// discoveredPool is a config with one Redis-discovered pool held to
// allow = ["127.0.0.2/32"]; its Redis is never reached.
const discoveredPool = `
[[routes]]
pool = "relay"
[[pools]]
name = "relay"
  [pools.discovery]
  kind = "redis"
  name = "wsgate:test"
  redis = "redis://127.0.0.1:1"
  interval = "100ms"
  allow = ["127.0.0.2/32"]
`

// TestDialerHoldsToPolicy dials through a pool dialer held to a policy,
// with and without source addresses: a refused address is never
// connected to (the listener accepts nothing), an allowed one is.
func TestDialerHoldsToPolicy(t *testing.T) {
	refused, accepts := testproc.CountingListener(t, "127.0.0.1")
	allowed, _ := testproc.CountingListener(t, "127.0.0.2")
	policy := NewNodePolicy(conf.Discovery{Kind: "dns", Allow: []string{"127.0.0.2/32"}})
	for _, sources := range [][]string{nil, {"127.0.0.5"}} {
		d, err := newDialer("p", sources, 2*time.Second, quietLog(), nil)
		if err != nil {
			t.Fatal(err)
		}
		d.holdTo(policy)
		c, err := d.Dial(allowed.Addr().String())
		if err != nil {
			t.Fatalf("sources %v: allowed address: %v", sources, err)
		}
		if sources != nil && !strings.HasPrefix(c.LocalAddr().String(), "127.0.0.5:") {
			t.Fatalf("dialed from %v, want source 127.0.0.5", c.LocalAddr())
		}
		c.Close()
		var re *refusedAddrError
		if _, err := d.Dial(refused.Addr().String()); !errors.As(err, &re) || errors.Is(err, ErrLocalDial) {
			t.Fatalf("sources %v: refused address dialed: %v", sources, err)
		}
		// DialSocket runs the same checks on its bare socket.
		fd, _, err := d.DialSocket(allowed.Addr().String())
		if err != nil {
			t.Fatalf("sources %v: allowed address as a bare socket: %v", sources, err)
		}
		_ = unix.Close(fd)
		if _, _, err := d.DialSocket(refused.Addr().String()); !errors.As(err, &re) || errors.Is(err, ErrLocalDial) {
			t.Fatalf("sources %v: refused address dialed as a bare socket: %v", sources, err)
		}
		// A host name is held to the address it resolves to.
		_, port, _ := net.SplitHostPort(refused.Addr().String())
		if _, err := d.Dial(net.JoinHostPort("localhost", port)); err == nil {
			t.Fatalf("sources %v: localhost:%s dialed", sources, port)
		}
	}
	// A discovered pool's own dialer is held to its section's policy.
	cfg, err := conf.Parse("policy.toml", []byte(discoveredPool))
	if err != nil {
		t.Fatal(err)
	}
	p, _, _, err := NewPool(&cfg.Pools[0], nil, nil, balancer.NewRegistry(), quietLog(), nil, func(int, int) Admission { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Health.Stop()
	var re *refusedAddrError
	if _, err := p.Dialer.Dial(refused.Addr().String()); !errors.As(err, &re) {
		t.Fatalf("the pool's dialer dialed a refused address: %v", err)
	}
	if n := accepts.Load(); n != 0 {
		t.Fatalf("the refused address accepted %d connections", n)
	}
}

// fixedSource answers every lookup with the same nodes.
type fixedSource []discovery.Node

func (f fixedSource) Lookup(context.Context) ([]discovery.Node, error) { return f, nil }

// TestPolicySource checks an answer is filtered before the watcher sees
// it: refused nodes are left out and logged once per new set, and an
// answer naming only refused nodes is an empty one.
func TestPolicySource(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	policy := NewNodePolicy(conf.Discovery{Kind: "redis", Allow: []string{"10.0.0.0/8"}})
	mixed := fixedSource{{Addr: "10.0.0.1:7001", Weight: 1}, {Addr: "169.254.169.254:80", Weight: 1}, {Addr: "192.168.0.1:7001", Weight: 1}}
	s := &policySource{src: mixed, policy: policy, log: log}
	for range 3 {
		nodes, err := s.Lookup(context.Background())
		if err != nil || len(nodes) != 1 || nodes[0].Addr != "10.0.0.1:7001" {
			t.Fatalf("got %v, %v; want only 10.0.0.1:7001", nodes, err)
		}
	}
	if n := strings.Count(logs.String(), "discovered nodes left out"); n != 2 {
		t.Fatalf("%d lines logged over three identical answers, want one per reason (2):\n%s", n, logs.String())
	}
	for _, want := range []string{whyNever, "169.254.169.254:80", whyNotAllow, "192.168.0.1:7001"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs.String())
		}
	}
	s.src = mixed[1:]
	if _, err := s.Lookup(context.Background()); !errors.Is(err, discovery.ErrEmpty) {
		t.Fatalf("an answer of refused nodes only: %v, want ErrEmpty", err)
	}
	// A flood of refused keys costs one bounded line.
	var flood fixedSource
	for i := range discovery.MaxNodes {
		flood = append(flood, discovery.Node{Addr: fmt.Sprintf("192.168.%d.%d:7001", i/250, 1+i%250), Weight: 1})
	}
	logs.Reset()
	s.src = flood
	if _, err := s.Lookup(context.Background()); !errors.Is(err, discovery.ErrEmpty) {
		t.Fatalf("an answer of %d refused nodes: %v, want ErrEmpty", len(flood), err)
	}
	line := logs.String()
	if n := strings.Count(line, "192.168."); n != maxLoggedNodes || !strings.Contains(line, fmt.Sprintf("count=%d", len(flood))) {
		t.Fatalf("the line names %d addresses, want %d and the count %d:\n%s", n, maxLoggedNodes, len(flood), line)
	}
}
