// Command drip measures what a byte drip costs the gateway (issue 19 item
// 11): -clients WebSocket clients through one wsgate to a node that reads
// and drops everything send the same bytes either one byte per TCP
// segment (TCP_NODELAY, one write per byte, -pause between bytes) or as
// whole frames (one write per 106-byte frame, at the same byte rate). It
// reports the gateway's CPU time (utime+stime) over the run, the bytes
// the clients got written, the CPU per byte, and how many clients the
// gateway closed with 1008 (the route's -byte-rate / -frame-rate).
//
// -mode reader measures the keepalive against a slow reader (issue 19
// item 3) instead: one client reads a stream the node sends as fast as
// the gateway takes it, at -read-rate bytes a second, answering each ping
// as soon as it reads it, on a route with -ping-interval and
// -pong-timeout; it reports how much it read and whether the gateway cut
// it (wsgate_tunnels_closed_total{reason="pong_timeout"}).
//
// -mode hung measures the keepalive against a client whose application
// hangs (issue 19 item 3's review): one client neither reads nor sends
// while its node sends a 1 KiB frame every -trickle (0: nothing); it
// reports when the gateway cut it with pong_timeout, counted from the
// handshake, or that it did not within -duration.
//
// Everything runs on 127.0.0.1 and stops after -duration; the gateway it
// starts is stopped by its PID.
//
// Usage:
//
//	go build -o /tmp/wsgate ./cmd/wsgate
//	drip -gateway /tmp/wsgate [-engine epoll|goroutines] -mode drip|frames [-clients 100] [-duration 10s]
//	     [-pause 2ms] [-byte-rate 4096] [-frame-rate 0]
//	drip -gateway /tmp/wsgate [-engine epoll|goroutines] -mode reader [-duration 10s] [-read-rate 1048576]
//	     [-ping-interval 1s] [-pong-timeout 1s]
//	drip -gateway /tmp/wsgate [-engine epoll|goroutines] -mode hung [-duration 60s] [-trickle 50ms]
//	     [-read-buffer 0] [-ping-interval 1s] [-pong-timeout 1s]
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

	"golang.org/x/sys/unix"
)

func main() {
	gw := flag.String("gateway", "", "the wsgate binary")
	mode := flag.String("mode", "drip", "drip (one byte per segment) or frames (whole frames)")
	clients := flag.Int("clients", 100, "clients")
	duration := flag.Duration("duration", 10*time.Second, "how long the clients send")
	pause := flag.Duration("pause", 2*time.Millisecond, "pause between bytes (frames: between frames, times the frame's size)")
	byteRate := flag.Int("byte-rate", 4096, "the route's byte_rate (0: none)")
	frameRate := flag.Int("frame-rate", 0, "the route's frame_rate (0: none)")
	readRate := flag.Int("read-rate", 1<<20, "reader: bytes a second the client reads")
	pingInterval := flag.Duration("ping-interval", time.Second, "reader, hung: the route's ping_interval")
	pongTimeout := flag.Duration("pong-timeout", time.Second, "reader, hung: the route's pong_timeout")
	flag.DurationVar(&tricklePause, "trickle", 50*time.Millisecond, "hung: the node sends a 1 KiB frame this often (0: nothing)")
	readBuffer := flag.Int("read-buffer", 0, "hung: the client's SO_RCVBUF in bytes (0: the system's, autotuned)")
	flag.StringVar(&engine, "engine", "epoll", "the gateway's tunnel_engine: epoll or goroutines")
	flag.Parse()
	if *gw == "" || (*mode != "drip" && *mode != "frames" && *mode != "reader" && *mode != "hung") || *clients < 1 || *clients > 1000 || *duration > 2*time.Minute {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	switch *mode {
	case "reader":
		err = runReader(*gw, *duration, *readRate, *pingInterval, *pongTimeout)
	case "hung":
		err = runHung(*gw, *duration, *pingInterval, *pongTimeout, *readBuffer)
	default:
		err = run(*gw, *mode, *clients, *duration, *pause, *byteRate, *frameRate)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drip:", err)
		os.Exit(1)
	}
}

// engine is the gateway's tunnel_engine (-engine).
var engine string

// tricklePause is how often the node sends a hung client a frame
// (-trickle).
var tricklePause time.Duration

// gateway is a wsgate started for a run, with a node behind it.
type gateway struct {
	addr, admin string
	pid         int
	node        net.Listener
	dir         string
	cmd         *exec.Cmd
	log         *os.File
}

// startGateway starts a node and a wsgate in front of it whose one route
// has the keys in route, and waits until a handshake through it succeeds;
// it returns that first client.
func startGateway(gw, route, path string) (*gateway, *client, error) {
	node, err := startNode()
	if err != nil {
		return nil, nil, err
	}
	g := &gateway{node: node}
	port, err1 := freePort()
	aport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		g.stop()
		return nil, nil, err
	}
	g.addr, g.admin = "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(aport)
	if g.dir, err = os.MkdirTemp("", "drip"); err != nil {
		g.stop()
		return nil, nil, err
	}
	cfg := fmt.Sprintf(`[gateway]
listen = %q
tunnel_engine = %q
[admin]
listen = %q
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
%s`, g.addr, engine, g.admin, node.Addr().String(), route)
	cfgPath := filepath.Join(g.dir, "wsgate.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		g.stop()
		return nil, nil, err
	}
	if g.log, err = os.Create(filepath.Join(g.dir, "wsgate.log")); err != nil {
		g.stop()
		return nil, nil, err
	}
	g.cmd = exec.Command(gw, "-config", cfgPath)
	g.cmd.Stdout, g.cmd.Stderr = g.log, g.log
	if err := g.cmd.Start(); err != nil {
		g.cmd = nil
		g.stop()
		return nil, nil, err
	}
	g.pid = g.cmd.Process.Pid
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := dial(g.addr, path)
		if err == nil {
			return g, c, nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(g.dir, "wsgate.log"))
			g.stop()
			return nil, nil, fmt.Errorf("no handshake through the gateway: %w\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops the gateway by its PID and the node, and removes the files.
func (g *gateway) stop() {
	if g.cmd != nil {
		_ = syscall.Kill(g.pid, syscall.SIGKILL)
		_ = g.cmd.Wait()
	}
	if g.log != nil {
		g.log.Close()
	}
	if g.dir != "" {
		os.RemoveAll(g.dir)
	}
	g.node.Close()
}

// metric returns the value of the gateway's metric series line that
// starts with series, 0 if none.
func (g *gateway) metric(series string) (float64, error) {
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, nil
}

func run(gw, mode string, clients int, duration, pause time.Duration, byteRate, frameRate int) error {
	g, first, err := startGateway(gw, fmt.Sprintf("frame_rate = %d\nbyte_rate = %d\n", frameRate, byteRate), "/drip")
	if err != nil {
		return err
	}
	defer g.stop()
	pid := g.pid
	conns := []*client{first}
	for len(conns) < clients {
		c, err := dial(g.addr, "/drip")
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
	fmt.Printf("engine %s, mode %s, %d clients, %v, byte_rate %d, frame_rate %d: bytes written %d, gateway CPU %v (%.1f%% of a core), %.2f µs/byte, closed with 1008: %d\n",
		engine, mode, clients, elapsed.Round(time.Millisecond), byteRate, frameRate, n, used, 100*used.Seconds()/elapsed.Seconds(), perByte, cut)
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

// dial opens a WebSocket to path through the gateway with TCP_NODELAY on.
func dial(addr, path string) (*client, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	tc := conn.(*net.TCPConn)
	_ = tc.SetNoDelay(true)
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
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
		switch r.URL.Path {
		case "/stream":
			go stream(conn)
		case "/trickle":
			go trickle(conn)
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

// stream writes 16 KiB binary frames to conn until a write fails (the
// connection closed), at most 64 MiB.
func stream(conn net.Conn) {
	f := append([]byte{0x82, 126, 0x40, 0}, make([]byte, 16<<10)...)
	for range 4096 {
		if _, err := conn.Write(f); err != nil {
			return
		}
	}
}

// runReader has one client read a stream through the gateway at readRate
// bytes a second, answering each ping at once, and reports whether the
// gateway cut it with pong_timeout.
func runReader(gw string, duration time.Duration, readRate int, pingInterval, pongTimeout time.Duration) error {
	route := fmt.Sprintf("ping_interval = %q\npong_timeout = %q\n", pingInterval.String(), pongTimeout.String())
	g, c, err := startGateway(gw, route, "/stream")
	if err != nil {
		return err
	}
	defer g.stop()
	defer c.conn.Close()
	start := time.Now()
	var read int64
	pings := 0
	var end string
	pong := []byte{0x8a, 0x80, 1, 2, 3, 4}
	buf := make([]byte, 4096)
	var pending []byte // bytes read and not yet parsed
	for time.Since(start) < duration && end == "" {
		allowed := int64(float64(readRate)*time.Since(start).Seconds()) - read
		if allowed < int64(len(buf)) {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		_ = c.conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.br.Read(buf)
		read += int64(n)
		pending = append(pending, buf[:n]...)
		// Take whole frames off pending.
		for len(pending) >= 2 && end == "" {
			size, hdr := int(pending[1]&0x7f), 2
			switch size {
			case 126:
				if len(pending) < 4 {
					break
				}
				size, hdr = int(pending[2])<<8|int(pending[3]), 4
			case 127:
				if len(pending) < 10 {
					break
				}
				size, hdr = 0, 10
				for _, b := range pending[2:10] {
					size = size<<8 | int(b)
				}
			}
			if (size == 126 && hdr == 2) || (size == 127 && hdr == 2) || len(pending) < hdr+size {
				break
			}
			switch pending[0] & 0x0f {
			case 0x9:
				pings++
				if _, err := c.conn.Write(pong); err != nil {
					end = "pong write: " + err.Error()
				}
			case 0x8:
				code := 0
				if size >= 2 {
					code = int(pending[hdr])<<8 | int(pending[hdr+1])
				}
				end = fmt.Sprintf("close %d after %v", code, time.Since(start).Round(100*time.Millisecond))
			}
			pending = pending[hdr+size:]
		}
		if err != nil && end == "" && !errors.Is(err, os.ErrDeadlineExceeded) {
			end = fmt.Sprintf("%v after %v", err, time.Since(start).Round(100*time.Millisecond))
		}
	}
	cut, err := g.metric(`wsgate_tunnels_closed_total{reason="pong_timeout"}`)
	if err != nil {
		return err
	}
	if end == "" {
		end = "still open"
	}
	fmt.Printf("engine %s, mode reader, ping_interval %v, pong_timeout %v, reading %d bytes/s for %v: read %.2f MB, %d pings answered, %s; tunnels cut with pong_timeout: %v\n",
		engine, pingInterval, pongTimeout, readRate, duration, float64(read)/1e6, pings, end, cut)
	return nil
}

// trickle writes a 1 KiB binary frame to conn every tricklePause (none
// when it is 0) until a write fails (the connection closed), for two
// minutes at most.
func trickle(conn net.Conn) {
	if tricklePause <= 0 {
		return
	}
	f := append([]byte{0x82, 126, 0x04, 0}, make([]byte, 1<<10)...)
	for until := time.Now().Add(2 * time.Minute); time.Now().Before(until); {
		time.Sleep(tricklePause)
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(f); err != nil {
			return
		}
	}
}

// runHung has one client that neither reads nor sends hold a tunnel while
// its node trickles frames toward it, and reports when the gateway cut it
// with pong_timeout. A readBuffer > 0 is set as the client's SO_RCVBUF:
// the larger the buffer, the longer it takes the trickle unread.
func runHung(gw string, duration, pingInterval, pongTimeout time.Duration, readBuffer int) error {
	route := fmt.Sprintf("ping_interval = %q\npong_timeout = %q\n", pingInterval.String(), pongTimeout.String())
	g, c, err := startGateway(gw, route, "/trickle")
	if err != nil {
		return err
	}
	defer g.stop()
	defer c.conn.Close()
	if readBuffer > 0 {
		if err := c.conn.SetReadBuffer(readBuffer); err != nil {
			return err
		}
	}
	start := time.Now()
	end := fmt.Sprintf("not cut within %v", duration)
	for time.Since(start) < duration {
		cut, err := g.metric(`wsgate_tunnels_closed_total{reason="pong_timeout"}`)
		if err != nil {
			return err
		}
		if cut > 0 {
			end = fmt.Sprintf("cut with pong_timeout %v after the handshake", time.Since(start).Round(10*time.Millisecond))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	unread := 0
	if raw, err := c.conn.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { unread, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	}
	fmt.Printf("engine %s, mode hung, ping_interval %v, pong_timeout %v, a 1 KiB frame every %v, read buffer %d: %s; %d bytes unread in the client's socket\n",
		engine, pingInterval, pongTimeout, tricklePause, readBuffer, end, unread+c.br.Buffered())
	return nil
}
