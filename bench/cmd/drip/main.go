// Command drip measures what a byte drip costs the gateway (issue 19 item
// 11): -clients WebSocket clients through one wsgate to a node that reads
// and drops everything send the same bytes either one byte per TCP
// segment (TCP_NODELAY, one write per byte, -pause between bytes) or as
// whole frames (one write per 106-byte frame, at the same byte rate). It
// reports the gateway's CPU time (utime+stime) over the run, the bytes
// the clients got written, the CPU per byte, and how many clients the
// gateway closed with 1008 (the route's -byte-rate / -frame-rate).
//
// Everything runs on 127.0.0.1 and stops after -duration; the gateway it
// starts is stopped by its PID.
//
// Usage:
//
//	go build -o /tmp/wsgate ./cmd/wsgate
//	drip -gateway /tmp/wsgate -mode drip|frames [-clients 100] [-duration 10s]
//	     [-pause 2ms] [-byte-rate 4096] [-frame-rate 0]
package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	gw := flag.String("gateway", "", "the wsgate binary")
	mode := flag.String("mode", "drip", "drip (one byte per segment) or frames (whole frames)")
	clients := flag.Int("clients", 100, "clients")
	duration := flag.Duration("duration", 10*time.Second, "how long the clients send")
	pause := flag.Duration("pause", 2*time.Millisecond, "pause between bytes (frames: between frames, times the frame's size)")
	byteRate := flag.Int("byte-rate", 4096, "the route's byte_rate (0: none)")
	frameRate := flag.Int("frame-rate", 0, "the route's frame_rate (0: none)")
	flag.Parse()
	if *gw == "" || (*mode != "drip" && *mode != "frames") || *clients < 1 || *clients > 1000 || *duration > 2*time.Minute {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*gw, *mode, *clients, *duration, *pause, *byteRate, *frameRate); err != nil {
		fmt.Fprintln(os.Stderr, "drip:", err)
		os.Exit(1)
	}
}

func run(gw, mode string, clients int, duration, pause time.Duration, byteRate, frameRate int) error {
	node, err := startNode()
	if err != nil {
		return err
	}
	defer node.Close()
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dir, err := os.MkdirTemp("", "drip")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := fmt.Sprintf(`[gateway]
listen = %q
[admin]
listen = ""
[[pools]]
name = "sink"
  [pools.health]
  interval = "200ms"
  timeout = "200ms"
  rise = 1
  [[pools.nodes]]
  addr = %q
[[routes]]
pool = "sink"
frame_rate = %d
byte_rate = %d
`, addr, node.Addr().String(), frameRate, byteRate)
	path := filepath.Join(dir, "wsgate.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "wsgate.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(gw, "-config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()

	// The gateway is up once a handshake through it succeeds.
	var conns []*client
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := dial(addr)
		if err == nil {
			conns = append(conns, c)
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "wsgate.log"))
			return fmt.Errorf("no handshake through the gateway: %w\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for len(conns) < clients {
		c, err := dial(addr)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.conn.Close()
		}
	}()

	cpu0, err := cpuTime(pid)
	if err != nil {
		return err
	}
	start := time.Now()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(2)
		go func() { defer wg.Done(); c.readCloses() }()
		go func() { defer wg.Done(); sent.Add(c.send(mode, start.Add(duration), pause)) }()
	}
	time.Sleep(duration)
	cpu1, err := cpuTime(pid)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	for _, c := range conns {
		_ = c.conn.SetDeadline(time.Now()) // ends both loops of every client
	}
	wg.Wait()
	var cut int
	for _, c := range conns {
		if c.code.Load() == 1008 {
			cut++
		}
	}
	used := cpu1 - cpu0
	n := sent.Load()
	perByte := 0.0
	if n > 0 {
		perByte = float64(used.Microseconds()) / float64(n)
	}
	fmt.Printf("mode %s, %d clients, %v, byte_rate %d, frame_rate %d: bytes written %d, gateway CPU %v (%.1f%% of a core), %.2f µs/byte, closed with 1008: %d\n",
		mode, clients, elapsed.Round(time.Millisecond), byteRate, frameRate, n, used, 100*used.Seconds()/elapsed.Seconds(), perByte, cut)
	return nil
}

// client is one WebSocket client through the gateway.
type client struct {
	conn *net.TCPConn
	br   *bufio.Reader
	code atomic.Int32 // the close code the gateway sent, 0 for none yet
}

// frameBytes is one masked binary frame with a 100-byte payload.
var frameBytes = func() []byte {
	b := []byte{0x82, 0x80 | 100, 1, 2, 3, 4}
	return append(b, make([]byte, 100)...)
}()

// send writes frames until until or a close from the gateway, and returns
// how many bytes it wrote.
func (c *client) send(mode string, until time.Time, pause time.Duration) int64 {
	var n int64
	for i := 0; time.Now().Before(until) && c.code.Load() == 0; i++ {
		if mode == "frames" {
			w, err := c.conn.Write(frameBytes)
			n += int64(w)
			if err != nil {
				return n
			}
			time.Sleep(time.Duration(len(frameBytes)) * pause)
			continue
		}
		w, err := c.conn.Write(frameBytes[i%len(frameBytes) : i%len(frameBytes)+1])
		n += int64(w)
		if err != nil {
			return n
		}
		time.Sleep(pause)
	}
	return n
}

// readCloses reads what the gateway sends until a close frame, whose code
// it records, and answers it.
func (c *client) readCloses() {
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return
		}
		size := int(h[1] & 0x7f)
		switch size {
		case 126:
			var l [2]byte
			if _, err := io.ReadFull(c.br, l[:]); err != nil {
				return
			}
			size = int(l[0])<<8 | int(l[1])
		case 127:
			return // no node frame here is that large
		}
		p := make([]byte, size)
		if _, err := io.ReadFull(c.br, p); err != nil {
			return
		}
		if h[0]&0x0f == 0x8 && size >= 2 {
			c.code.Store(int32(p[0])<<8 | int32(p[1]))
			return
		}
	}
}

// dial opens a WebSocket through the gateway with TCP_NODELAY on.
func dial(addr string) (*client, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	tc := conn.(*net.TCPConn)
	_ = tc.SetNoDelay(true)
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET /drip HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := tc.Write([]byte(req)); err != nil {
		tc.Close()
		return nil, err
	}
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tc.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		tc.Close()
		return nil, fmt.Errorf("handshake: %s", resp.Status)
	}
	_ = tc.SetDeadline(time.Time{})
	return &client{conn: tc, br: br}, nil
}

// startNode starts a WebSocket node on 127.0.0.1 that answers /healthz,
// accepts every upgrade and reads and drops what its clients send.
func startNode() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			w.WriteHeader(http.StatusOK)
			return
		}
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
		if err := brw.Flush(); err != nil {
			return
		}
		// Drop everything; answer the gateway's close (1001 when it cut a
		// client) so the client hears its own close code.
		_ = answerClose(brw.Reader, conn)
	})}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}

// answerClose reads frames from r until a close frame and answers it with
// close 1000.
func answerClose(r *bufio.Reader, w io.Writer) error {
	for {
		var h [2]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return err
		}
		size := int64(h[1] & 0x7f)
		switch size {
		case 126:
			var l [2]byte
			if _, err := io.ReadFull(r, l[:]); err != nil {
				return err
			}
			size = int64(l[0])<<8 | int64(l[1])
		case 127:
			var l [8]byte
			if _, err := io.ReadFull(r, l[:]); err != nil {
				return err
			}
			size = 0
			for _, b := range l {
				size = size<<8 | int64(b)
			}
		}
		if h[1]&0x80 != 0 {
			size += 4
		}
		if _, err := io.CopyN(io.Discard, r, size); err != nil {
			return err
		}
		if h[0]&0x0f == 0x8 {
			_, err := w.Write([]byte{0x88, 2, 0x03, 0xe8})
			return err
		}
	}
}

// cpuTime is the process's utime+stime from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad /proc stat times")
	}
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// freePort returns a port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
