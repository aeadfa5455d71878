package upstream

import (
	"context"
	"net"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
)

// OpenH2 gives a pool with protocol = "h2" a set of HTTP/2 connections per
// node (see h2.Set), spreading each node's streams over size connections
// configured by cfg; with [pools.tls] they are TLS, ALPN "h2".
// A node old (the pool it replaces) had with the same settings (TLS files
// of the same contents included) keeps its
// set, so a reload opens no connection and leaves every stream where it
// is; RetireH2 closes the sets old has and p does not. Sets are dialed on
// first use: one p never uses (a reload that fails) costs nothing. poll,
// when not nil, runs the new sets' connections' reads (h2.Set.Poller).
// The streams of a connection lost end spread over lost (drain_window),
// unless the node is gone for good (see h2.Set.SetLost).
func (p *Pool) OpenH2(old *Pool, size int, cfg h2.Config, poll h2.SpreadPoller, lost time.Duration) {
	p.H2 = make(map[*balancer.Node]*h2.Set, len(p.Balancer.Nodes()))
	p.h2Lost = lost
	ping := p.Conf.H2PingInterval.Duration
	for _, n := range p.Balancer.Nodes() {
		if old != nil {
			// NewPool gave p old's TLS when its files read the same.
			if s := old.H2[n]; s != nil && s.Size == size && s.PingInterval == ping && s.Config == cfg && old.TLS == p.TLS {
				p.H2[n] = s
				continue
			}
		}
		s := &h2.Set{
			Dial:         p.h2Dial(n.Addr()),
			Config:       cfg,
			Size:         size,
			PingInterval: ping,
			Poller:       poll,
		}
		s.SetLost(lost, p.ConnectTimeout)
		s.SetFloodBackoff(p.H2Backoff)
		p.H2[n] = s
	}
}

// h2Dial is how p's HTTP/2 sets open a connection to the node at addr.
func (p *Pool) h2Dial(addr string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		return p.dialNode(ctx, addr, nil, ALPNH2, nil)
	}
}

// RetireH2 closes the HTTP/2 sets p has and next does not (a node removed,
// the protocol or its settings changed, or next is nil): they take no new
// stream, and each connection closes once the streams it carries have
// ended. The sets next kept from p dial through next from now on (its
// source_addrs, connect_timeout and node policy) and end the streams of a
// lost connection over next's window: it is called once next is the pool
// in force.
func (p *Pool) RetireH2(next *Pool) {
	for n, s := range p.H2 {
		switch {
		case next == nil || next.H2[n] != s:
			s.Close()
		case next != p:
			s.SetDial(next.h2Dial(n.Addr()))
			s.SetLost(next.h2Lost, next.ConnectTimeout)
			s.SetFloodBackoff(next.H2Backoff)
		}
	}
}
