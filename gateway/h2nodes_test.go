package gateway

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// idleConn is a PolledConn that reads nothing: it takes a poller's turn.
type idleConn struct{}

func (idleConn) PollRead(int, bool) (bool, bool) { return true, false }
func (idleConn) PollDetached(error)              {}

// TestH2ConnsOnDistinctPollers pins that a node's h2_connections are read
// by distinct pollers, so that its clients' tunnels spread over the cores:
// another connection takes the pollers' turn between the node's two, as a
// tunnel to another pool's node would. Before, the node's connections took
// the global turn, and with two pollers both landed on one.
func TestH2ConnsOnDistinctPollers(t *testing.T) {
	if os.Getenv("WSGATE_TUNNEL_ENGINE") == "goroutines" {
		t.Skip("no pollers on the goroutine engine")
	}
	_, addr := startStdNode(t)
	e := newEnv(t, 0, h2Pool("h2_connections = 2", addr))
	first := e.mustDial("/ws")
	echoOnce(t, first, "one")
	if tunnel.Pollers() < 2 {
		t.Skipf("%d poller", tunnel.Pollers())
	}
	// Another connection takes a turn.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if owner, detach := tunnel.AttachConn(other, idleConn{}); owner != nil {
		defer detach()
	}
	second := e.mustDial("/ws")
	echoOnce(t, second, "two")
	if st := e.h2Set(addr).Stats(); st.Conns != 2 || st.Polled != 2 || st.Pollers != 2 {
		t.Errorf("set %+v, want 2 connections read by 2 pollers", st)
	}
	first.Close()
	second.Close()
	e.waitZero()
}

// TestH2LostConnSpreads1012 pins that the clients of a node connection
// lost under hundreds of streams get their 1012 spread over drain_window,
// as a drain spreads its 1001, while the node can be reached again: the
// connection is cut between the gateway and a node that stays up. Every
// client gets 1012, the last no sooner than the window allows, and every
// count (tunnels, node leases, streams held) returns to zero. Before, all
// got it in the same instant.
func TestH2LostConnSpreads1012(t *testing.T) {
	n, window := 200, 2*time.Second
	if v, err := strconv.Atoi(os.Getenv("WSGATE_H2_HERD_CLIENTS")); err == nil && v > 0 {
		n = v // 5,000 for the figure in docs/operations.md
	}
	_, node := startStdNode(t, "-max-streams", strconv.Itoa(max(n, 1000)))
	proxy := newCutProxyGW(t, node)
	cfg := strings.Replace(h2Pool("h2_connections = 1", proxy.addr()), `drain_window = "100ms"`, fmt.Sprintf("drain_window = %q", window), 1)
	e := newEnv(t, 0, cfg)
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = e.mustDial("/ws")
	}
	echoOnce(t, conns[0], "up")
	ends := make(chan time.Time, n)
	codes := make(chan error, n)
	for _, c := range conns {
		go func() {
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					ends <- time.Now()
					codes <- err
					return
				}
			}
		}()
	}
	cutAt := time.Now()
	proxy.cut()
	var last time.Time
	after := make([]time.Duration, 0, n)
	for range n {
		if err := <-codes; !websocket.IsCloseError(err, 1012) {
			t.Errorf("want close 1012, got %v", err)
		}
		at := <-ends
		if at.After(last) {
			last = at
		}
		after = append(after, at.Sub(cutAt))
	}
	slices.Sort(after)
	t.Logf("%d clients: 1012 after the cut: first %v, median %v, last %v (drain_window %v)", n, after[0], after[n/2], after[n-1], window)
	if min := window * time.Duration(n-1) / time.Duration(n); last.Sub(cutAt) < min {
		t.Errorf("the last 1012 came %v after the cut, want spread over %v", last.Sub(cutAt), window)
	}
	for _, c := range conns {
		c.Close()
	}
	e.waitZero()
	if st := e.h2Set(proxy.addr()).Stats(); st.Held != 0 || st.Streams != 0 {
		t.Errorf("set %+v after every client left", st)
	}
}

// cutProxyGW is a TCP proxy to a node whose connections a test cuts.
type cutProxyGW struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxyGW(t *testing.T, node string) *cutProxyGW {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxyGW{ln: ln}
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", node)
			if err != nil {
				a.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, a, b)
			p.mu.Unlock()
			go func() { io.Copy(a, b); a.Close() }()
			go func() { io.Copy(b, a); b.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxyGW) addr() string { return p.ln.Addr().String() }

// cut closes the connections through the proxy made so far, the health
// probes' included.
func (p *cutProxyGW) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
