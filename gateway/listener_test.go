package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/internal/testproc"
	"golang.org/x/sys/unix"
)

// rawConn dials the gateway from the local address from (a 127.0.0.0/8
// address) and sends nothing.
func rawConn(t *testing.T, gw, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitOpen polls the limiter until n slots are open.
func (e *env) waitOpen(n int64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.limits.Open() != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("open slots %d, want %d", e.srv.limits.Open(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readAnswer reads an HTTP answer off c without sending anything.
func readAnswer(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	// A bound, not a speed: the answer comes at once on a quiet machine.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	return resp
}

// TestUnfinishedRequestsCountAtAccept pins issue 9 item 3: connections that
// have not sent (or finished) a request used to escape max_conns_per_ip and
// max_conns, which were checked only after a whole upgrade request was
// read. Now a silent connection holds its slot from accept: one more from
// the same address is answered 429 before it sends a byte, while another
// address still gets its tunnel.
func TestUnfinishedRequestsCountAtAccept(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith("max_conns_per_ip = 3", "", ""))
	for range 3 {
		c := rawConn(t, e.gw, "127.0.0.1")
		_, _ = c.Write([]byte("GET /room/x HTTP/1.1\r\nHo")) // never finished
	}
	e.waitOpen(3)
	over := rawConn(t, e.gw, "127.0.0.1")
	resp := readAnswer(t, over)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("fourth connection from one address: %d %v", resp.StatusCode, resp.Header)
	}
	if got := e.srv.limits.FromIP(netip.MustParseAddr("127.0.0.1")); got != 3 {
		t.Fatalf("127.0.0.1 holds %d slots, want 3", got)
	}
	d := websocket.Dialer{NetDial: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial}
	ws, _, err := d.Dial("ws://"+e.gw+"/room/x", nil)
	if err != nil {
		t.Fatalf("another address is denied: %v", err)
	}
	ws.Close()
}

// TestIdleConnectionsFillMaxConns pins the global half of issue 9 item 3:
// silent connections count against max_conns, so a handshake over it gets
// 503 + Retry-After, and a slot freed by a closed socket admits the next.
func TestIdleConnectionsFillMaxConns(t *testing.T) {
	e := newEnv(t, 1, oneNodeWith("max_conns = 2", "", ""))
	a := rawConn(t, e.gw, "127.0.0.1")
	rawConn(t, e.gw, "127.0.0.2")
	e.waitOpen(2)
	_, resp, err := e.dial("/room/x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("handshake over max_conns=2 held by idle sockets: %v %+v", err, resp)
	}
	a.Close()
	e.waitOpen(1)
	ws := e.mustDial("/room/x")
	ws.Close()
}

var errorsAttr = regexp.MustCompile(`(?:accept failed|accepting again).* errors=(\d+)`)

// flakyListener fails its next n accepts with EMFILE, as a process out of
// descriptors does.
type flakyListener struct {
	net.Listener
	n atomic.Int32
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if f.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// brokenListener accepts until broken is closed, then fails for good.
type brokenListener struct {
	net.Listener
	broken chan struct{}
}

func (b *brokenListener) Accept() (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() { c, err := b.Listener.Accept(); ch <- result{c, err} }()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-b.broken:
		_ = b.Listener.Close()
		if r := <-ch; r.c != nil {
			r.c.Close()
		}
		return nil, errors.New("accept: listener broke")
	}
}

// startWith builds a gateway from cfg, opens its client listener through
// wrap, and starts it.
func startWith(t *testing.T, cfg string, log *slog.Logger, wrap func(net.Listener) net.Listener) *Server {
	t.Helper()
	c, err := conf.Parse("test.toml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(c, log)
	if err != nil {
		t.Fatal(err)
	}
	client := c.Gateway.Listen
	srv.SetListen(func(addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil || addr != client {
			return ln, err
		}
		return wrap(ln), nil
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// oneNodeAt is a gateway config on gw with an admin listener, one node at
// node and a catch-all route.
func oneNodeAt(gw, node string) string {
	return fmt.Sprintf("[gateway]\nlisten = %q\ndrain_window = \"100ms\"\n[admin]\nlisten = \"127.0.0.1:0\"\n"+
		"[[pools]]\nname = \"relay\"\n  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"relay\"\n", gw, node)
}

// TestAcceptOutlivesEMFILE pins issue 9 item 2: an accept error for want of
// descriptors used to end fasthttp's Serve for good. The listener now
// pauses and accepts again: the connection waiting in the queue is served,
// each error is counted, the log says so at most once a second with a
// count, and the gateway stays ready.
func TestAcceptOutlivesEMFILE(t *testing.T) {
	e := newEnv(t, 1, oneNode) // for its relay
	var logs testproc.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	const fails = 8 // about 0.8 s of pauses
	var flaky *flakyListener
	srv := startWith(t, oneNodeAt(testproc.FreeAddr(t), e.addrs[0]), log, func(ln net.Listener) net.Listener {
		flaky = &flakyListener{Listener: ln}
		flaky.n.Store(fails)
		return flaky
	})
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial("ws://"+srv.Addr().String()+"/room/x", nil)
	if err != nil {
		t.Fatalf("handshake after EMFILE: %v", err)
	}
	ws.Close()
	if flaky.n.Load() >= 0 {
		t.Fatalf("the listener did not fail %d times first", fails)
	}
	errs := map[string]float64{}
	te := &env{t: t, srv: srv}
	for _, mf := range te.scrape()["wsgate_accept_errors_total"].GetMetric() {
		errs[mf.GetLabel()[0].GetValue()] = mf.GetCounter().GetValue()
	}
	if errs["EMFILE"] != fails {
		t.Fatalf("wsgate_accept_errors_total %v, want EMFILE %d", errs, fails)
	}
	if code, body := te.admin(http.MethodGet, "/readyz", ""); code != 200 {
		t.Fatalf("/readyz %d %s after outliving EMFILE", code, body)
	}
	deadline := time.Now().Add(5 * time.Second) // the last line may wait out the second
	for !strings.Contains(logs.String(), "accepting again") {
		if time.Now().After(deadline) {
			t.Fatalf("no 'accepting again' line:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	out := logs.String()
	lines, counted := 0, 0
	for _, l := range strings.Split(out, "\n") {
		if m := errorsAttr.FindStringSubmatch(l); m != nil {
			lines++
			n, _ := strconv.Atoi(m[1])
			counted += n
		}
	}
	if lines > 3 || counted != fails || strings.Count(out, "accept failed") < 1 {
		t.Fatalf("%d lines counting %d errors, want at most 3 lines (one a second, and the last) counting %d:\n%s", lines, counted, fails, out)
	}
	select {
	case err := <-srv.Failed():
		t.Fatalf("gateway failed: %v", err)
	default:
	}
}

// TestDeadAcceptLoopFailsReadiness pins the other half of issue 9 item 2:
// an accept loop that stopped for good left /readyz saying ready. Now the
// gateway turns not ready and Failed delivers the error, which the process
// exits on.
func TestDeadAcceptLoopFailsReadiness(t *testing.T) {
	var logs testproc.Buffer
	broken := make(chan struct{})
	srv := startWith(t, oneNodeAt(testproc.FreeAddr(t), testproc.FreeAddr(t)), slog.New(slog.NewTextHandler(&logs, nil)),
		func(ln net.Listener) net.Listener { return &brokenListener{Listener: ln, broken: broken} })
	te := &env{t: t, srv: srv}
	if code, _ := te.admin(http.MethodGet, "/readyz", ""); code != 200 {
		t.Fatalf("/readyz %d before the listener broke", code)
	}
	close(broken)
	select {
	case err := <-srv.Failed():
		if !strings.Contains(err.Error(), "listener broke") {
			t.Fatalf("Failed delivered %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Failed delivered nothing after the accept loop died")
	}
	if code, body := te.admin(http.MethodGet, "/readyz", ""); code != fasthttp.StatusServiceUnavailable {
		t.Fatalf("/readyz %d %s with a dead accept loop", code, body)
	}
	if !strings.Contains(logs.String(), "no longer accepts") {
		t.Fatalf("no log line:\n%s", logs.String())
	}
}

// gatewaySockets counts this process's open sockets whose local address
// is gw, the gateway's listening address, and whose peer is ip (any peer
// for the zero Addr): the gateway's side of the connections from ip that
// still hold a descriptor (a socket fully closed by the gateway keeps
// none, even while the kernel finishes its close). The local address is
// matched whole, not only its port: a client socket bound to another
// loopback address can be given the gateway's port number as its own
// ephemeral port. It asks each of this process's descriptors for its
// addresses rather than reading /proc/net/tcp, whose size is every socket
// on the machine: on a busy machine reading it made each call take long
// enough for the lingers under test to expire between calls.
func gatewaySockets(t *testing.T, gw netip.AddrPort, ip netip.Addr) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A descriptor closed (or reused) since the listing is only
		// miscounted for this call.
		local, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		if l, ok := inetAddr(local); !ok || l != gw {
			continue
		}
		remote, err := unix.Getpeername(fd)
		if err != nil {
			continue // the listener, or not connected
		}
		if r, ok := inetAddr(remote); !ok || ip.IsValid() && r.Addr() != ip {
			continue
		}
		n++
	}
	return n
}

// inetAddr is sa as an address and port, IPv4-mapped addresses unmapped;
// false for a socket address of another family.
func inetAddr(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}

// TestRefusalLingerKeepsPerIPCap pins one address holding more sockets than
// max_conns_per_ip: with the gateway full, its connections over the cap
// were answered 503 (the global cap is checked first) and each lingered,
// up to 64 at once, so an address at its cap held up to 64 sockets more. A
// lingering refused socket now takes a place of its address's own and
// does not linger without one.
func TestRefusalLingerKeepsPerIPCap(t *testing.T) {
	const perIP = 4
	// The silent connections that fill the caps must outlive the test on a
	// slow machine: a long handshake_timeout keeps fasthttp from cutting them.
	e := newEnv(t, 1, oneNodeWith(fmt.Sprintf("max_conns = %d\nmax_conns_per_ip = %d\nhandshake_timeout = \"2m\"", perIP, perIP), "", ""))
	gw := netip.MustParseAddrPort(e.gw)
	ip := netip.MustParseAddr("127.0.0.1")
	for range perIP {
		rawConn(t, e.gw, "127.0.0.1")
	}
	e.waitOpen(perIP)
	peak := 0
	for range 20 {
		c := rawConn(t, e.gw, "127.0.0.1") // kept open: the gateway's side lingers
		if resp := readAnswer(t, c); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("connection over max_conns answered %d", resp.StatusCode)
		}
		peak = max(peak, gatewaySockets(t, gw, ip))
	}
	// The refusal just answered may not be closed yet when it is counted
	// (the gateway closes it after writing the answer the client read):
	// one socket over the cap is that, more would be lingering.
	if peak < perIP { // the admitted connections are held open: counting is broken
		t.Fatalf("counted %d sockets at the gateway, %d admitted ones are open", peak, perIP)
	}
	if peak > perIP+1 {
		t.Fatalf("127.0.0.1 held %d sockets at the gateway, max_conns_per_ip = %d (and 1 refusal closing)", peak, perIP)
	}
	// Another address, with room of its own, still gets its answer to read.
	c := rawConn(t, e.gw, "127.0.0.2")
	if resp := readAnswer(t, c); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("127.0.0.2 answered %d", resp.StatusCode)
	}
}

// TestRefusalLingerBounded hits the bounds of the lingering 503 refusal:
// at most edge.RefuseLingerMax refused sockets linger at a time gateway-wide,
// whatever the number of addresses they come from, and each is closed
// after edge.RefuseLingerTime even when its client neither reads nor closes.
func TestRefusalLingerBounded(t *testing.T) {
	// A long handshake_timeout keeps the silent connection that fills
	// max_conns open however slowly the refusals below run.
	e := newEnv(t, 1, oneNodeWith("max_conns = 1\nhandshake_timeout = \"2m\"", "", ""))
	gw := netip.MustParseAddrPort(e.gw)
	rawConn(t, e.gw, "127.0.0.1") // fills max_conns
	e.waitOpen(1)
	const n = edge.RefuseLingerMax + 36
	peak := 0
	for i := range n {
		// One address each, so no per-IP cap stops a linger: only the
		// gateway-wide bound does.
		c := rawConn(t, e.gw, fmt.Sprintf("127.0.%d.%d", 1+i/250, 2+i%250))
		if resp := readAnswer(t, c); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("connection over max_conns answered %d", resp.StatusCode)
		}
		peak = max(peak, gatewaySockets(t, gw, netip.Addr{}))
	}
	// As above, the refusal just answered may be counted before it is
	// closed once edge.RefuseLingerMax others linger.
	if peak < 1 { // the admitted connection is held open: counting is broken
		t.Fatal("counted no socket at the gateway, the admitted one is open")
	}
	if peak > 1+edge.RefuseLingerMax+1 {
		t.Fatalf("the gateway held %d sockets: 1 admitted and %d refusals, want at most %d lingering and 1 closing", peak, peak-1, edge.RefuseLingerMax)
	}
	// None of the clients closes: every linger must end by itself.
	deadline := time.Now().Add(30 * time.Second)
	for gatewaySockets(t, gw, netip.Addr{}) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d refused sockets still open 30s on; a linger ends after %v", gatewaySockets(t, gw, netip.Addr{})-1, edge.RefuseLingerTime)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("peak %d gateway-side sockets (1 admitted), %d refusals", peak, n)
}
