package gateway

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
)

// pool is a [[pools]] entry at run time: the balancer's view of its nodes,
// how to dial them, and an HTTP client per node for plain requests.
type pool struct {
	name           string
	bal            *balancer.Pool
	connectTimeout time.Duration
	tries          int
	dial           *dialer
	http           map[*balancer.Node]*fasthttp.HostClient
}

func newPool(pc *conf.Pool) (*pool, error) {
	picker, err := balancer.NewPicker(pc.Balance)
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	d, err := newDialer(pc.SourceAddrs, pc.ConnectTimeout.Duration)
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	p := &pool{
		name:           pc.Name,
		connectTimeout: pc.ConnectTimeout.Duration,
		tries:          pc.ConnectTries,
		dial:           d,
		http:           make(map[*balancer.Node]*fasthttp.HostClient, len(pc.Nodes)),
	}
	nodes := make([]*balancer.Node, 0, len(pc.Nodes))
	for _, nc := range pc.Nodes {
		n := balancer.NewNode(nc.Addr, nc.Weight, nc.MaxConns)
		nodes = append(nodes, n)
		p.http[n] = &fasthttp.HostClient{
			Addr:                          nc.Addr,
			Dial:                          func(addr string) (net.Conn, error) { return d.dial(addr) },
			ReadTimeout:                   30 * time.Second,
			WriteTimeout:                  30 * time.Second,
			MaxIdleConnDuration:           30 * time.Second,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true,
			NoDefaultUserAgentHeader:      true,
		}
	}
	p.bal = balancer.NewPool(pc.Name, picker, nodes)
	return p, nil
}

// dialer opens connections to nodes, rotating over the pool's source
// addresses so that one node can take more connections than one source
// address has ports.
type dialer struct {
	dialers []net.Dialer
	next    atomic.Uint32
}

func newDialer(sources []string, timeout time.Duration) (*dialer, error) {
	d := &dialer{}
	for _, s := range sources {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("source address %q is not an IP", s)
		}
		d.dialers = append(d.dialers, net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: ip}})
	}
	if len(d.dialers) == 0 {
		d.dialers = []net.Dialer{{Timeout: timeout}}
	}
	return d, nil
}

func (d *dialer) dial(addr string) (net.Conn, error) {
	i := 0
	if len(d.dialers) > 1 {
		i = int(d.next.Add(1) % uint32(len(d.dialers)))
	}
	return d.dialers[i].Dial("tcp", addr)
}
