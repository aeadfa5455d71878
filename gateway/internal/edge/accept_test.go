package edge

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testca"
)

// counts is a Metrics, AccessLog and ReloadMetrics that records what it
// is told.
type counts struct {
	mu       sync.Mutex
	refused  map[string]int
	errnos   map[string]int
	lines    []string
	reloaded []bool
}

func newCounts() *counts { return &counts{refused: map[string]int{}, errnos: map[string]int{}} }

func (c *counts) Refused(limit string) { c.mu.Lock(); c.refused[limit]++; c.mu.Unlock() }

func (c *counts) AcceptError(errno string) { c.mu.Lock(); c.errnos[errno]++; c.mu.Unlock() }

func (c *counts) Connection(_ net.Conn, status int, reason string) {
	c.mu.Lock()
	c.lines = append(c.lines, fmt.Sprintf("%d %s", status, reason))
	c.mu.Unlock()
}

func (c *counts) TLSReloaded(ok bool) {
	c.mu.Lock()
	c.reloaded = append(c.reloaded, ok)
	c.mu.Unlock()
}

func (c *counts) refusedAt(limit string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused[limit]
}

var (
	_ Metrics       = (*counts)(nil)
	_ AccessLog     = (*counts)(nil)
	_ ReloadMetrics = (*counts)(nil)
)

// serveListener accepts on l until it is closed, holding every admitted
// connection open; it returns them as they come.
func serveListener(t *testing.T, l *Listener) <-chan net.Conn {
	t.Helper()
	out := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			out <- c
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		close(out)
		for c := range out {
			_ = c.Close()
		}
	})
	return out
}

// dialFrom dials addr from the loopback address from.
func dialFrom(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestListenerRefusesOverLimits runs a Listener alone on loopback: a
// connection over max_conns_per_ip is answered 429 and one over max_conns
// 503, both with the Retry-After read at the refusal and Connection:
// close; each refusal is counted under its limit and has its access log
// line; a freed slot admits the next connection.
func TestListenerRefusesOverLimits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newCounts()
	limits := NewLimiter(2, 1, 0)
	l := NewListener(ln, limits, m, slog.New(slog.DiscardHandler), m, func() int { return 7 })
	admitted := serveListener(t, l)
	addr := ln.Addr().String()

	first := dialFrom(t, addr, "127.0.0.1")
	held := <-admitted
	if _, ok := held.(*CountedConn); !ok {
		t.Fatalf("admitted a %T, want a *CountedConn", held)
	}
	over := dialFrom(t, addr, "127.0.0.1")
	if resp := readResponse(t, over); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" || !resp.Close {
		t.Fatalf("over max_conns_per_ip: %d %v, want 429 with Retry-After 7", resp.StatusCode, resp.Header)
	}
	waitFor(t, func() bool { return m.refusedAt("max_conns_per_ip") == 1 })
	dialFrom(t, addr, "127.0.0.2")
	<-admitted // the gateway is full now
	c := dialFrom(t, addr, "127.0.0.3")
	if resp := readResponse(t, c); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "7" || !resp.Close {
		t.Fatalf("over max_conns: %d %v, want 503 with Retry-After 7", resp.StatusCode, resp.Header)
	}
	waitFor(t, func() bool { return m.refusedAt("max_conns") == 1 })
	m.mu.Lock()
	lines := strings.Join(m.lines, ",")
	m.mu.Unlock()
	if lines != "429 max_conns_per_ip,503 max_conns" {
		t.Fatalf("access log lines %q", lines)
	}

	_ = first.Close()
	_ = held.Close() // frees its slot
	if limits.Open() != 1 {
		t.Fatalf("open %d after a close, want 1", limits.Open())
	}
	dialFrom(t, addr, "127.0.0.1")
	select {
	case <-admitted:
	case <-time.After(10 * time.Second):
		t.Fatal("a freed slot did not admit the next connection")
	}
}

// readResponse reads an HTTP answer off c without sending anything.
func readResponse(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound, not a speed
	b, err := io.ReadAll(c)
	if len(b) == 0 {
		t.Fatalf("no answer: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		t.Fatalf("answer %q: %v", b, err)
	}
	resp.Body.Close()
	return resp
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// emfileListener fails its next n accepts with EMFILE, as a process out
// of descriptors does.
type emfileListener struct {
	net.Listener
	n atomic.Int32
}

func (f *emfileListener) Accept() (net.Conn, error) {
	if f.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// TestListenerOutlivesEMFILE checks that Accept pauses on EMFILE instead
// of returning it, counts each error by its errno, and returns the
// connection waiting once accepts succeed again; and that Close ends an
// Accept that is pausing.
func TestListenerOutlivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &emfileListener{Listener: ln}
	f.n.Store(3)
	m := newCounts()
	l := NewListener(f, nil, m, slog.New(slog.DiscardHandler), nil, func() int { return 1 })
	defer l.Close()
	dialFrom(t, ln.Addr().String(), "127.0.0.1")
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE: %v", err)
	}
	c.Close()
	m.mu.Lock()
	n := m.errnos["EMFILE"]
	m.mu.Unlock()
	if n != 3 {
		t.Fatalf("accept errors counted %d, want 3", n)
	}

	f.n.Store(1 << 30) // fails for good
	errc := make(chan error, 1)
	go func() { _, err := l.Accept(); errc <- err }()
	waitFor(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.errnos["EMFILE"] > 3 })
	_ = l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close returned %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a pausing Accept")
	}
}

// TestTransientAcceptError sorts accept errors: a shortage of descriptors
// or kernel memory is outlived, anything else is not.
func TestTransientAcceptError(t *testing.T) {
	for _, tc := range []struct {
		err   error
		errno string
		ok    bool
	}{
		{os.NewSyscallError("accept4", syscall.EMFILE), "EMFILE", true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, "ENFILE", true},
		{syscall.ENOBUFS, "ENOBUFS", true},
		{syscall.ENOMEM, "ENOMEM", true},
		{syscall.ECONNABORTED, "", false},
		{net.ErrClosed, "", false},
		{errors.New("accept: listener broke"), "", false},
	} {
		if errno, ok := transientAcceptError(tc.err); errno != tc.errno || ok != tc.ok {
			t.Errorf("%v: %q %t, want %q %t", tc.err, errno, ok, tc.errno, tc.ok)
		}
	}
}

// TestCertificateBySNI checks the choice of a server certificate by the
// client's server name: an exact name before a wildcard, a wildcard for
// one label only, names compared without case or trailing dot, and the
// first certificate otherwise; and that Reload counts a loading that
// failed and keeps the set in force.
func TestCertificateBySNI(t *testing.T) {
	ca, err := testca.New("edge test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var table strings.Builder
	for i, names := range [][]string{{"gw.test"}, {"*.example.test"}, {"a.example.test"}} {
		leaf, err := ca.Server(names...)
		if err != nil {
			t.Fatal(err)
		}
		c, k, err := leaf.WriteFiles(dir, fmt.Sprintf("server%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&table, "  [[gateway.tls.certificates]]\n  cert_file = %q\n  key_file = %q\n", c, k)
	}
	cfg, err := conf.Parse("edge.toml", []byte(`
[gateway]
listen = "127.0.0.1:0"
  [gateway.tls]
  listen = "127.0.0.1:1"
`+table.String()+`
[[pools]]
name = "p"
  [[pools.nodes]]
  addr = "127.0.0.1:1"
[[routes]]
pool = "p"
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := LoadTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sni  string
		want string
	}{
		{"a.example.test", "a.example.test"}, {"A.Example.Test.", "a.example.test"},
		{"b.example.test", "*.example.test"}, {"x.b.example.test", "gw.test"},
		{"example.test", "gw.test"}, {"other.test", "gw.test"}, {"", "gw.test"},
	} {
		c, err := set.certificate(&tls.ClientHelloInfo{ServerName: tc.sni})
		if err != nil || c.Leaf.DNSNames[0] != tc.want {
			t.Errorf("SNI %q: %v %v, want the certificate for %s", tc.sni, c.Leaf.DNSNames, err, tc.want)
		}
	}

	m := newCounts()
	st := NewCertificates(slog.New(slog.DiscardHandler))
	st.Swap(set)
	if err := os.WriteFile(filepath.Join(dir, "server0.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad, err := st.Load(cfg)
	st.Reloaded(cfg, bad, err, m)
	if len(m.reloaded) != 1 || m.reloaded[0] || st.set.Load() != set {
		t.Fatalf("a broken key: reloads %v, set in force replaced %t", m.reloaded, st.set.Load() != set)
	}
}

// TestOfferKeepsTheNewerReading pins the order of TLS loadings that run
// side by side outside the reload lock (a config reload and the watcher
// after a file changed): of two readings of the same files, the one begun
// later stays in force whichever is offered last; a reading of other
// files (a reload that named new ones) always goes in.
func TestOfferKeepsTheNewerReading(t *testing.T) {
	ca, err := testca.New("edge test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFor := func(name string) *conf.Config {
		leaf, err := ca.Server(name)
		if err != nil {
			t.Fatal(err)
		}
		c, k, err := leaf.WriteFiles(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := conf.Parse("edge.toml", []byte(fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
  [gateway.tls]
  listen = "127.0.0.1:1"
  [[gateway.tls.certificates]]
  cert_file = %q
  key_file = %q
[[pools]]
name = "p"
  [[pools.nodes]]
  addr = "127.0.0.1:1"
[[routes]]
pool = "p"
`, c, k)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a, b := cfgFor("a.test"), cfgFor("b.test")
	st := NewCertificates(slog.New(slog.DiscardHandler))
	load := func(cfg *conf.Config) *CertSet {
		set, err := st.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	older, newer, other := load(a), load(a), load(b)
	if !st.LoadBegunAfter(older) || !st.LoadBegunAfter(newer) || st.LoadBegunAfter(other) || st.LoadBegunAfter(nil) {
		t.Fatal("LoadBegunAfter: want true for the first two readings only")
	}
	for i, step := range []struct {
		offer *CertSet
		took  bool
		want  *CertSet
	}{
		{newer, true, newer},
		{older, false, newer}, // same files, read before: the newer stays
		{other, true, other},  // other files: in, though read before nothing newer
		{older, true, older},  // back to a's files: in
	} {
		if took := st.Offer(step.offer); took != step.took || st.set.Load() != step.want {
			t.Fatalf("step %d: Offer took %t, in force is the wanted set %t; want %t, true", i, took, st.set.Load() == step.want, step.took)
		}
	}
}
