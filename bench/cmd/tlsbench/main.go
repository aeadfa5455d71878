// Command tlsbench measures wsgate's TLS termination against nginx's, and
// its WebSockets over HTTP/2 against HAProxy's (h2.go), run by
// `make bench-tls`. It makes a throwaway CA and an ECDSA P-256 server
// certificate, starts redis-server and one relay-backend (bench's stack),
// then wsgate with a TLS listener and nginx with an ssl listener in front
// of that relay, both on one core (GOMAXPROCS=1, worker_processes 1), and
// measures for each:
//
//   - idle memory per TLS tunnel: the proxy's RSS growth (VmRSS, summed
//     over its processes) per wss connection, with -idle connections open
//     and silent after their 101;
//   - TLS handshakes per second: -workers clients doing full TLS 1.3
//     handshakes (X25519, no resumption) and closing, for -duration, -reps
//     times per proxy in rotation (medians); and the proxy's CPU time per
//     handshake (utime+stime), which depends less than the rate on how much
//     of the machine the clients and other programs took.
//
// Every process it starts is stopped by its PID at the end.
//
// Usage:
//
//	tlsbench [-idle 2000] [-workers 32] [-duration 5s] [-reps 3] [-dir DIR]
//	         [-h2-conns 20] [-h2-streams 100] [-h2-workers 16]
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/internal/stack"
	"github.com/wsgate/wsgate/internal/testca"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("tlsbench", flag.ExitOnError)
	idle := fs.Int("idle", 2000, "idle wss connections per proxy")
	workers := fs.Int("workers", 32, "concurrent handshaking clients")
	dur := fs.Duration("duration", 5*time.Second, "one handshake run")
	reps := fs.Int("reps", 3, "handshake runs per proxy, in rotation; the table has their medians")
	dir := fs.String("dir", "", "directory for logs and configs (default: a new one in $TMPDIR)")
	var h h2Flags
	fs.IntVar(&h.conns, "h2-conns", 20, "HTTP/2 connections for idle memory per WebSocket stream")
	fs.IntVar(&h.streams, "h2-streams", 100, "WebSocket streams per HTTP/2 connection (at most wsgate's h2_max_streams, 100)")
	fs.IntVar(&h.workers, "h2-workers", 16, "clients opening WebSockets at once, over one HTTP/2 connection or a TLS connection each")
	_ = fs.Parse(os.Args[1:])
	if err := run(ctx, *dir, *idle, *workers, *reps, *dur, h, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tlsbench:", err)
		os.Exit(1)
	}
}

// proxy is one TLS terminator under measurement.
type proxy struct {
	name string
	addr string // its TLS listener
	proc *stack.Proc
	pids func() ([]int, error)
}

// h2Flags are the HTTP/2 rows' settings (see h2.go).
type h2Flags struct{ conns, streams, workers int }

func run(ctx context.Context, dir string, idleN, workers, reps int, dur time.Duration, h h2Flags, out io.Writer) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "wsgate-tlsbench-")
		if err != nil {
			return err
		}
		dir = d
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	bins, err := stack.Build(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	st, err := stack.Up(stack.Options{Dir: dir, Bins: bins, Relays: 1, Gateways: 1})
	if err != nil {
		return err
	}
	defer st.Close()
	relay := st.Relays[0]

	ca, err := testca.New("tlsbench CA")
	if err != nil {
		return err
	}
	leaf, err := ca.Server("localhost", "127.0.0.1")
	if err != nil {
		return err
	}
	certFile, keyFile, err := leaf.WriteFiles(dir, "server")
	if err != nil {
		return err
	}

	gw, err := startWSGate(st, bins.WSGate, dir, certFile, keyFile)
	if err != nil {
		return err
	}
	defer gw.proc.Stop(10 * time.Second)
	proxies := []*proxy{gw}
	if bin, err := stack.FindPeer(stack.Nginx); err == nil {
		ng, err := startNginx(bin, dir, relay.Addr, certFile, keyFile)
		if err != nil {
			return err
		}
		defer ng.proc.Stop(10 * time.Second)
		proxies = append(proxies, ng)
	} else {
		fmt.Fprintln(out, "nginx not installed: its column is left out (apt-get install -y nginx-light)")
	}

	fmt.Fprintf(out, "TLS 1.3, ECDSA P-256 certificate, X25519; each proxy on one core; relay %s; logs in %s\n\n", relay.Addr, dir)
	perConn := make([]float64, len(proxies))
	for i, p := range proxies {
		if perConn[i], err = idleMemory(ctx, p, relay, idleN); err != nil {
			return fmt.Errorf("%s idle: %w", p.name, err)
		}
	}
	rates := make([][]float64, len(proxies))
	cpus := make([][]float64, len(proxies))
	for r := range reps {
		for k := range proxies {
			i := (k + r) % len(proxies) // rotated, so neither always runs first
			rate, cpu, err := handshakes(ctx, proxies[i], workers, dur)
			if err != nil {
				return fmt.Errorf("%s handshakes: %w", proxies[i].name, err)
			}
			rates[i] = append(rates[i], rate)
			cpus[i] = append(cpus[i], float64(cpu.Microseconds()))
		}
	}
	fmt.Fprintf(out, "| proxy | idle RSS per TLS tunnel (%d conns) | TLS handshakes/s (median of %d, %d clients) | proxy CPU per handshake (median) |\n", idleN, reps, workers)
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: |")
	for i, p := range proxies {
		fmt.Fprintf(out, "| %s | %.1f KiB | %.0f | %.0f µs |\n", p.name, perConn[i]/1024, median(rates[i]), median(cpus[i]))
	}
	fmt.Fprintf(out, "\nhandshakes/s of each run: ")
	for i, p := range proxies {
		fmt.Fprintf(out, "%s %.0f  ", p.name, rates[i])
	}
	fmt.Fprintln(out)

	// The HTTP/2 rows, beside the HTTP/1.1 ones.
	h2s := []*proxy{gw}
	if bin, err := stack.FindPeer(stack.HAProxy); err == nil {
		hp, err := startHAProxy(bin, dir, relay.Addr, certFile, keyFile)
		if err != nil {
			return err
		}
		defer hp.proc.Stop(10 * time.Second)
		h2s = append(h2s, hp)
	} else {
		fmt.Fprintln(out, "haproxy not installed: its HTTP/2 row is left out (apt-get install -y haproxy)")
	}
	type row struct {
		name, proto string
		perWS       float64
		opens, cpu  []float64
	}
	var rows []*row
	for _, p := range h2s {
		per, err := idleStreams(ctx, p, relay, h.conns, h.streams)
		if err != nil {
			return fmt.Errorf("%s idle streams: %w", p.name, err)
		}
		rows = append(rows, &row{name: p.name, proto: "h2"})
		rows[len(rows)-1].perWS = per
	}
	for i, p := range proxies {
		rows = append(rows, &row{name: p.name, proto: "http/1.1", perWS: perConn[i]})
	}
	for r := range reps {
		for k := range rows {
			i := (k + r) % len(rows)
			var rate float64
			var cpu time.Duration
			var err error
			if i < len(h2s) {
				rate, cpu, err = streamOpens(ctx, h2s[i], h.workers, dur)
			} else {
				rate, cpu, err = wssOpens(ctx, proxies[i-len(h2s)], h.workers, dur)
			}
			if err != nil {
				return fmt.Errorf("%s %s opens: %w", rows[i].name, rows[i].proto, err)
			}
			rows[i].opens = append(rows[i].opens, rate)
			rows[i].cpu = append(rows[i].cpu, float64(cpu.Microseconds()))
		}
	}
	fmt.Fprintf(out, "\n| proxy | client protocol | idle RSS per WebSocket | WebSocket opens/s (median of %d, %d clients) | proxy CPU per open (median) |\n", reps, h.workers)
	fmt.Fprintln(out, "| --- | --- | ---: | ---: | ---: |")
	for _, r := range rows {
		how := fmt.Sprintf("h2, %d streams a connection", h.streams)
		if r.proto != "h2" {
			how = "http/1.1, a TLS connection each"
		}
		fmt.Fprintf(out, "| %s | %s | %.1f KiB | %.0f | %.0f µs |\n", r.name, how, r.perWS/1024, median(r.opens), median(r.cpu))
	}
	return nil
}

// startWSGate starts wsgate on one core with a TLS listener in front of
// the stack's relay.
func startWSGate(st *stack.Stack, bin, dir, certFile, keyFile string) (*proxy, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := stack.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	// h2 on: the HTTP/2 rows use it; the HTTP/1.1 clients offer
	// http/1.1 only and get it.
	cfg := st.GatewayConfig(addrs[0], addrs[1]) + fmt.Sprintf(
		"\n[gateway.tls]\nlisten = %q\nh2 = true\n[[gateway.tls.certificates]]\ncert_file = %q\nkey_file = %q\n", addrs[2], certFile, keyFile)
	path := filepath.Join(dir, "wsgate-tls.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	os.Setenv("GOMAXPROCS", "1") // the child's environment: one core, as nginx's one worker
	p, err := stack.Start("wsgate-tls", filepath.Join(dir, "wsgate-tls.log"), bin, "-config", path)
	os.Unsetenv("GOMAXPROCS")
	if err != nil {
		return nil, err
	}
	if err := waitUp(p, "http://"+addrs[1]+"/readyz"); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	return &proxy{name: "wsgate", addr: addrs[2], proc: p, pids: func() ([]int, error) { return []int{p.Pid()}, nil }}, nil
}

// nginxTLSConfig is an nginx.conf like make bench's (one worker, least_conn
// upstream, WebSocket upgrades passed, an hour's tunnel timeouts) with an
// ssl listener: TLS 1.2 and 1.3, the same certificate.
func nginxTLSConfig(dir, addr, relay, certFile, keyFile string) string {
	plain := stack.NginxConfig(dir, "127.0.0.1:1", []string{relay}, os.Geteuid() == 0)
	return strings.Replace(plain, "listen 127.0.0.1:1;", fmt.Sprintf(
		"listen %s ssl;\n        ssl_certificate %s;\n        ssl_certificate_key %s;\n        ssl_protocols TLSv1.2 TLSv1.3;", addr, certFile, keyFile), 1)
}

func startNginx(bin, dir, relay, certFile, keyFile string) (*proxy, error) {
	addr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	ndir := filepath.Join(dir, "nginx-tls")
	if err := os.MkdirAll(filepath.Join(ndir, "nginx-temp"), 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(cfg, []byte(nginxTLSConfig(ndir, addr, relay, certFile, keyFile)), 0o644); err != nil {
		return nil, err
	}
	p, err := stack.Start("nginx-tls", filepath.Join(dir, "nginx-tls.log"), bin,
		"-c", cfg, "-p", ndir+"/", "-e", filepath.Join(ndir, "nginx-error.log"))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	if err := waitUpWith(p, hc, "https://"+addr+"/info"); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	pids := func() ([]int, error) {
		kids, err := probe.Children(p.Pid())
		return append([]int{p.Pid()}, kids...), err
	}
	return &proxy{name: "nginx", addr: addr, proc: p, pids: pids}, nil
}

func waitUp(p *stack.Proc, url string) error {
	return waitUpWith(p, &http.Client{Timeout: time.Second}, url)
}

// waitUpWith polls url until it answers 200, for at most 15s.
func waitUpWith(p *stack.Proc, hc *http.Client, url string) error {
	for range 150 {
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited (log %s)", url, p.Log)
		default:
		}
		if resp, err := hc.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not up after 15s (log %s)", url, p.Log)
}

// clientTLS is the clients' TLS: 1.3, X25519 only (the hybrid post-quantum
// group Go offers first is not in every OpenSSL), no session cache, so
// every handshake is a full one.
func clientTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, ServerName: "localhost",
		MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}, NextProtos: []string{"http/1.1"}}
}

// idleMemory opens n wss connections to p, each silent after its 101,
// and returns p's RSS growth per connection, read once the relay counts
// them all and two seconds have passed; then closes them and waits until
// the relay holds none.
func idleMemory(ctx context.Context, p *proxy, relay *stack.Relay, n int) (float64, error) {
	pids, err := p.pids()
	if err != nil {
		return 0, err
	}
	before, err := probe.RSSSum(pids)
	if err != nil {
		return 0, err
	}
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := wssOpen(p.addr, fmt.Sprintf("/room/tlsidle-%s-%d", p.name, i%100))
				if err != nil {
					errs <- err
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
		waitRelay(relay, func(n int) bool { return n == 0 })
	}()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	if !waitRelay(relay, func(c int) bool { return c >= n }) {
		return 0, errors.New("the relay never counted every connection")
	}
	time.Sleep(2 * time.Second) // the handshakes' garbage and buffers settle
	after, err := probe.RSSSum(pids)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

// waitRelay polls the relay's connection count until ok, for at most 60s.
func waitRelay(r *stack.Relay, ok func(int) bool) bool {
	for range 600 {
		if info, err := r.Info(); err == nil && ok(info.Connections) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// wssOpen opens one wss connection through addr and reads its 101.
func wssOpen(addr, path string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, clientTLS())
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// handshakes runs workers clients doing full TLS handshakes with p for
// dur and returns the handshakes per second and p's CPU time per
// handshake.
func handshakes(ctx context.Context, p *proxy, workers int, dur time.Duration) (float64, time.Duration, error) {
	return rate(ctx, p, workers, dur, "handshakes", func(int) func() error {
		cfg := clientTLS()
		return func() error {
			raw, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				return err
			}
			c := tls.Client(raw, cfg)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			defer c.Close()
			return c.Handshake()
		}
	})
}

// rate runs workers clients for dur, each calling the operation newOp
// makes for it over and over, and returns the operations per second and
// p's CPU time per operation; more than 1% of them failing (named what in
// the error, with the first failure) is an error.
func rate(ctx context.Context, p *proxy, workers int, dur time.Duration, what string, newOp func(worker int) func() error) (float64, time.Duration, error) {
	pids, err := p.pids()
	if err != nil {
		return 0, 0, err
	}
	cpu0, err := probe.CPUSum(pids)
	if err != nil {
		return 0, 0, err
	}
	var done, failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := newOp(w)
			for time.Now().Before(stop) && ctx.Err() == nil {
				if err := op(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := probe.CPUSum(pids)
	if err != nil {
		return 0, 0, err
	}
	n := done.Load()
	if n == 0 || failed.Load() > n/100 {
		return 0, 0, fmt.Errorf("%d %s, %d failed (first: %v)", n, what, failed.Load(), firstErr.Load())
	}
	return float64(n) / elapsed.Seconds(), (cpu1 - cpu0) / time.Duration(n), nil
}

// median of v (v is reordered).
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
