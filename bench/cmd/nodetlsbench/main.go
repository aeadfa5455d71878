// Command nodetlsbench measures what TLS to the nodes ([pools.tls]) costs
// the gateway: for an "http1" pool and an "h2" pool, each in the clear and
// over TLS, the gateway's RSS growth per idle client and its CPU time per
// forwarded frame.
//
// The node is an in-process relay (relay-backend's relay package, which
// serves HTTP/1.1 and cleartext HTTP/2 on one port), behind
// tls.NewListener offering ALPN h2 and http/1.1 for TLS, as the relay
// binary's -tls-cert does. wsgate runs as its own process
// (built here), GOMAXPROCS=1, so its figures are its own. For each case:
//
//   - idle: -idle clients open and silent after their 101; the gateway's
//     VmRSS growth over them, per client;
//   - traffic: -flows concurrent flows each sending -msgs messages of
//     -size bytes, one at a time, each waited for at its receiver (a
//     second member of the room); every message is two frames through
//     the gateway (client to node, node to client); the gateway's CPU
//     time (utime+stime) over the run, per frame.
//
// Usage:
//
//	go run ./bench/cmd/nodetlsbench [-idle 2000] [-flows 100] [-msgs 500] [-size 200]
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

func main() {
	idle := flag.Int("idle", 2000, "idle clients per case")
	flows := flag.Int("flows", 100, "concurrent message flows")
	msgs := flag.Int("msgs", 500, "messages per flow")
	size := flag.Int("size", 200, "message size in bytes")
	flag.Parse()
	if err := run(*idle, *flows, *msgs, *size); err != nil {
		fmt.Fprintln(os.Stderr, "nodetlsbench:", err)
		os.Exit(1)
	}
}

// bench is the run's shared state: binaries, the CA, the work directory.
type bench struct {
	dir    string
	wsgate string
	ca     *testca.CA
	caFile string
	cert   tls.Certificate
}

func run(idle, flows, msgs, size int) error {
	dir, err := os.MkdirTemp("", "nodetlsbench-")
	if err != nil {
		return err
	}
	b := &bench{dir: dir}
	b.wsgate = filepath.Join(dir, "wsgate")
	if out, err := exec.Command("go", "build", "-o", b.wsgate, "./cmd/wsgate").CombinedOutput(); err != nil {
		return fmt.Errorf("build wsgate: %v\n%s", err, out)
	}
	if b.ca, err = testca.New("nodetlsbench CA"); err != nil {
		return err
	}
	leaf, err := b.ca.Server("relay.test", "127.0.0.1")
	if err != nil {
		return err
	}
	b.cert = leaf.TLS()
	b.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(b.caFile, b.ca.PEM(), 0o644); err != nil {
		return err
	}
	fmt.Printf("wsgate GOMAXPROCS=1; %d idle clients; %d flows x %d messages of %d bytes; TLS 1.3 ECDSA P-256\n\n", idle, flows, msgs, size)
	fmt.Println("| case | RSS per idle client | gateway CPU per frame | frames/s |")
	fmt.Println("| --- | ---: | ---: | ---: |")
	for _, c := range []struct {
		name     string
		protocol string
		tls      bool
	}{{"http1", "http1", false}, {"http1 + TLS", "http1", true}, {"h2", "h2", false}, {"h2 + TLS", "h2", true}} {
		res, err := b.measure(c.protocol, c.tls, idle, flows, msgs, size)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		fmt.Printf("| %s | %.2f KiB | %.2f µs | %.0f |\n", c.name, res.rssPerIdle/1024, res.cpuPerFrame.Seconds()*1e6, res.framesPerSec)
	}
	return os.RemoveAll(dir)
}

// result is one case's figures.
type result struct {
	rssPerIdle   float64 // bytes
	cpuPerFrame  time.Duration
	framesPerSec float64
}

// measure runs one case: its node, a gateway in front of it, the idle
// clients, then the traffic.
func (b *bench) measure(protocol string, withTLS bool, idle, flows, msgs, size int) (res result, err error) {
	nodeAddr, stop, err := b.startNode(withTLS)
	if err != nil {
		return res, err
	}
	defer stop()
	gwAddr := freeAddr()
	cfg := fmt.Sprintf("[gateway]\nlisten = %q\nmax_conns_per_ip = 0\n[admin]\nlisten = \"\"\n[[pools]]\nname = \"relay\"\nprotocol = %q\n", gwAddr, protocol)
	if withTLS {
		cfg += fmt.Sprintf("  [pools.tls]\n  ca_file = %q\n", b.caFile)
	}
	cfg += fmt.Sprintf("  [[pools.nodes]]\n  addr = %q\n[[routes]]\npool = \"relay\"\n", nodeAddr)
	cfgFile := filepath.Join(b.dir, "wsgate-"+protocol+fmt.Sprint(withTLS)+".toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return res, err
	}
	gw := exec.Command(b.wsgate, "-config", cfgFile, "-watch=false", "-log-level", "warn")
	gw.Env = append(os.Environ(), "GOMAXPROCS=1")
	gw.Stderr = os.Stderr
	if err := gw.Start(); err != nil {
		return res, err
	}
	defer func() { _ = gw.Process.Kill(); _ = gw.Wait() }()
	pid := gw.Process.Pid
	path := "/room/"
	if err := waitDial(gwAddr, path+"warm"); err != nil {
		return res, err
	}

	// Idle clients.
	before, err := probe.RSS(pid)
	if err != nil {
		return res, err
	}
	conns := make([]*websocket.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range idle {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+gwAddr+path+fmt.Sprintf("idle-%d", i), nil)
		if err != nil {
			return res, fmt.Errorf("idle client %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	time.Sleep(2 * time.Second)
	after, err := probe.RSS(pid)
	if err != nil {
		return res, err
	}
	res.rssPerIdle = float64(after-before) / float64(idle)

	// Traffic.
	type flow struct{ send, recv *websocket.Conn }
	fl := make([]flow, flows)
	for i := range fl {
		s, _, err := websocket.DefaultDialer.Dial("ws://"+gwAddr+path+fmt.Sprintf("flow-%d", i), nil)
		if err != nil {
			return res, err
		}
		conns = append(conns, s)
		// The relay sends a member's message to the room's others.
		r, _, err := websocket.DefaultDialer.Dial("ws://"+gwAddr+path+fmt.Sprintf("flow-%d?hello=1", i), nil)
		if err != nil {
			return res, err
		}
		conns = append(conns, r)
		if _, _, err := r.ReadMessage(); err != nil { // hello: it has joined
			return res, err
		}
		fl[i] = flow{s, r}
	}
	msg := []byte(strings.Repeat("x", size))
	cpu0, err := probe.CPU(pid)
	if err != nil {
		return res, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, flows)
	for _, f := range fl {
		wg.Go(func() {
			for range msgs {
				if err := f.send.WriteMessage(websocket.BinaryMessage, msg); err != nil {
					errs <- err
					return
				}
				_ = f.recv.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, got, err := f.recv.ReadMessage(); err != nil || len(got) != size {
					errs <- fmt.Errorf("read %d bytes: %v", len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	cpu1, err := probe.CPU(pid)
	if err != nil {
		return res, err
	}
	select {
	case err := <-errs:
		return res, err
	default:
	}
	frames := float64(2 * flows * msgs)
	res.cpuPerFrame = time.Duration(float64(cpu1-cpu0) / frames)
	res.framesPerSec = frames / took.Seconds()
	return res, nil
}

// startNode starts a relay, behind TLS (ALPN h2 and http/1.1) with
// withTLS, and returns its address and how to stop it.
func (b *bench) startNode(withTLS bool) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mem := bus.NewMemory()
	r := relay.New(relay.Options{ID: "bench", Bus: mem.Endpoint(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	serve := ln
	if withTLS {
		serve = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{b.cert}, NextProtos: []string{"h2", "http/1.1"}})
	}
	go func() { _ = r.Serve(serve) }()
	return ln.Addr().String(), func() { _ = r.Close(context.Background()); _ = mem.Close() }, nil
}

// waitDial waits until a WebSocket through the gateway at addr opens.
func waitDial(addr, path string) error {
	var err error
	for range 100 {
		var c *websocket.Conn
		if c, _, err = websocket.DefaultDialer.Dial("ws://"+addr+path, nil); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no WebSocket through the gateway at %s: %w", addr, err)
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
