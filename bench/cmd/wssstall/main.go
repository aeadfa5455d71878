// Command wssstall measures what a wss client that reads slowly costs
// wsgate's TLS tunnels. It starts a node that streams -size bytes of
// binary frames to every WebSocket it accepts, and runs two clients, one
// after the other, each through a wsgate of its own (the binary given,
// with a TLS listener in front of the node; a throwaway CA; all on
// 127.0.0.1):
//
//   - pause: reads nothing for -pause after its 101, then reads on until
//     the stream is whole or nothing comes for 3 s; it prints the bytes
//     received and wsgate's CPU time (utime+stime) during the pause;
//   - slow: reads at -rate bytes per second in -bite reads for -window;
//     it prints the bytes received, when the last one came, and wsgate's
//     CPU time over the window.
//
// A healthy gateway delivers the whole stream after the pause and keeps
// the slow reader at its rate, with its CPU near zero while it waits.
// Every loop is bounded; each wsgate is stopped by its PID.
//
// Usage:
//
//	go build -o bin/wsgate ./cmd/wsgate
//	go run ./bench/cmd/wssstall -wsgate bin/wsgate
package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/internal/stack"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// frameSize is the payload of each frame the node streams.
const frameSize = 64 << 10

func main() {
	fs := flag.NewFlagSet("wssstall", flag.ExitOnError)
	bin := fs.String("wsgate", "bin/wsgate", "the wsgate binary to measure")
	size := fs.Int("size", 32<<20, "bytes each client's node streams")
	pause := fs.Duration("pause", 1500*time.Millisecond, "how long the pausing client reads nothing")
	rate := fs.Int("rate", 1_000_000, "the slow client's reading rate, bytes per second")
	bite := fs.Int("bite", 256<<10, "the slow client's read size")
	window := fs.Duration("window", 10*time.Second, "how long the slow client reads")
	dir := fs.String("dir", "", "directory for the config, certificates and log (default: a new one in $TMPDIR)")
	_ = fs.Parse(os.Args[1:])
	if err := run(*bin, *dir, *size, *rate, *bite, *pause, *window); err != nil {
		fmt.Fprintln(os.Stderr, "wssstall:", err)
		os.Exit(1)
	}
}

func run(bin, dir string, size, rate, bite int, pause, window time.Duration) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "wsgate-wssstall-")
		if err != nil {
			return err
		}
		dir = d
	}
	node, err := startNode(size)
	if err != nil {
		return err
	}
	defer node.Close()
	ca, err := testca.New("wssstall CA")
	if err != nil {
		return err
	}
	leaf, err := ca.Server("127.0.0.1")
	if err != nil {
		return err
	}
	certFile, keyFile, err := leaf.WriteFiles(dir, "server")
	if err != nil {
		return err
	}
	// Each client gets a wsgate of its own: what one client left
	// behind does not show in the other's figures.
	start := func(name string) (*stack.Proc, string, error) {
		var addrs [2]string // plain, TLS
		for i := range addrs {
			if addrs[i], err = stack.FreeAddr(); err != nil {
				return nil, "", err
			}
		}
		cfg := fmt.Sprintf(`[gateway]
listen = %q
write_timeout = "30s"
  [gateway.tls]
  listen = %q
  [[gateway.tls.certificates]]
  cert_file = %q
  key_file = %q
[admin]
listen = ""
[[pools]]
name = "stream"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/"
pool = "stream"
`, addrs[0], addrs[1], certFile, keyFile, node.Addr().String())
		cfgPath := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, "", err
		}
		gw, err := stack.Start(name, filepath.Join(dir, name+".log"), bin, "-config", cfgPath)
		if err != nil {
			return nil, "", err
		}
		if err := waitListening(addrs[1], 10*time.Second); err != nil {
			gw.Stop(10 * time.Second)
			return nil, "", err
		}
		return gw, addrs[1], nil
	}
	dial := func(addr string) (*websocket.Conn, error) {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}
		c, _, err := d.Dial("wss://"+addr+"/stream", nil)
		return c, err
	}
	cpu := func(gw *stack.Proc) time.Duration {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", gw.Pid()))
		if err != nil {
			return 0
		}
		d, _ := probe.ParseCPU(b)
		return d
	}
	fmt.Printf("wsgate %s with a TLS listener; node streams %.2f MiB per client in %d KiB frames; logs in %s\n",
		bin, mib(size), frameSize>>10, dir)

	gw, addr, err := start("wsgate-pause")
	if err != nil {
		return err
	}
	c, err := dial(addr)
	if err != nil {
		gw.Stop(10 * time.Second)
		return fmt.Errorf("pause client: %w", err)
	}
	c0 := cpu(gw)
	time.Sleep(pause)
	pauseCPU := cpu(gw) - c0
	got, _ := readFor(c, size, 0, 0, time.Minute)
	_ = c.Close()
	gw.Stop(10 * time.Second)
	fmt.Printf("pause: read nothing for %v, then received %.2f of %.2f MiB; wsgate CPU during the pause %.2fs\n",
		pause, mib(got.n), mib(size), pauseCPU.Seconds())

	gw, addr, err = start("wsgate-slow")
	if err != nil {
		return err
	}
	defer gw.Stop(10 * time.Second)
	c, err = dial(addr)
	if err != nil {
		return fmt.Errorf("slow client: %w", err)
	}
	c0 = cpu(gw)
	got, _ = readFor(c, size, rate, bite, window)
	slowCPU := cpu(gw) - c0
	_ = c.Close()
	fmt.Printf("slow: read %.1f MB/s in %d KiB reads for %v: received %.2f MB, the last byte at %.1fs; wsgate CPU %.2fs (%.0f%% of a core)\n",
		float64(rate)/1e6, bite>>10, window, float64(got.n)/1e6, got.last.Seconds(), slowCPU.Seconds(), 100*slowCPU.Seconds()/window.Seconds())
	return nil
}

func mib(n int) float64 { return float64(n) / (1 << 20) }

// progress is what a client read: payload bytes, and when the last came
// (since it began reading).
type progress struct {
	n    int
	last time.Duration
}

// readFor reads c's messages until size payload bytes came, for at most
// d, or until nothing comes for 3 s. With rate > 0 it reads bite bytes at
// a time, no faster than rate per second.
func readFor(c *websocket.Conn, size, rate, bite int, d time.Duration) (progress, error) {
	var p progress
	start := time.Now()
	buf := make([]byte, 64<<10)
	if bite > 0 {
		buf = make([]byte, bite)
	}
	var msg io.Reader
	for p.n < size && time.Since(start) < d {
		if rate > 0 {
			if ahead := time.Duration(float64(p.n+len(buf))/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(min(ahead, d-time.Since(start)))
				if time.Since(start) >= d {
					break
				}
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if msg == nil {
			_, r, err := c.NextReader()
			if err != nil {
				return p, err
			}
			msg = r
		}
		k, err := io.ReadFull(msg, buf[:min(len(buf), size-p.n)])
		if k > 0 {
			p.n += k
			p.last = time.Since(start)
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			msg = nil // the next message holds the rest
		case err != nil:
			return p, err
		}
	}
	return p, nil
}

// startNode listens on 127.0.0.1 for WebSocket handshakes, answering each
// with 101 and then size bytes of binary frames, and health checks with
// 200.
func startNode(size int) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpBinary, Length: frameSize})
	f = append(f, make([]byte, frameSize)...)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveNode(c, f, size)
		}
	}()
	return ln, nil
}

func serveNode(c net.Conn, f []byte, size int) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	if req.Header.Get("Upgrade") == "" {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+
		acceptKey(req.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n"); err != nil {
		return
	}
	for sent := 0; sent < size; sent += frameSize {
		if _, err := c.Write(f); err != nil {
			return
		}
	}
	_, _ = io.Copy(io.Discard, c) // until the gateway closes
}

// acceptKey computes Sec-WebSocket-Accept for key (RFC 6455 section 4.2.2).
func acceptKey(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// waitListening waits until addr accepts a TCP connection.
func waitListening(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wsgate not listening on %s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
