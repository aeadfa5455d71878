package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/upgrade"
)

// BenchmarkHandshakeChurn measures what one WebSocket handshake costs the
// gateway: each operation connects, sends an upgrade, reads the 101, sends
// one masked frame and reads its echo (one round trip through the tunnel),
// and closes, like wsload's churn. The client and the node are raw sockets
// with fixed buffers, so nearly everything allocated is the gateway's.
// "direct" runs the same client straight to the node, for the client's and
// node's share; "gateway" goes through an in-process gateway (no auth, no
// access log, one node). Besides ns/op and allocations it reports
// cpu-ns/op, the process's user+system CPU per handshake, which
// RunParallel spreads over GOMAXPROCS: the gateway's CPU per handshake is
// gateway's cpu-ns/op minus direct's.
//
//	go test -run '^$' -bench HandshakeChurn -benchmem -count 6 ./gateway
func BenchmarkHandshakeChurn(b *testing.B) {
	node := newEchoNode(b)
	gw := benchGateway(b, oneNode, []any{"127.0.0.1:0", node.addr})
	b.Run("direct", func(b *testing.B) { churn(b, node.addr) })
	b.Run("gateway", func(b *testing.B) { churn(b, gw) })
}

// churnRequest is the client's upgrade request; its key's accept is
// churnAccept.
const (
	churnRequest = "GET /room/bench HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	churnAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
)

// churnFrame is a masked 5-byte text frame, "hello"; churnClose a masked
// close frame with code 1000.
var (
	churnFrame = masked(0x81, []byte("hello"))
	churnClose = masked(0x88, []byte{0x03, 0xe8})
)

// masked renders a client frame: first byte b0, a payload under 126 bytes.
func masked(b0 byte, payload []byte) []byte {
	f := []byte{b0, 0x80 | byte(len(payload)), 0x37, 0xfa, 0x21, 0x3d}
	for i, c := range payload {
		f = append(f, c^f[2+i%4])
	}
	return f
}

// churn runs b.N handshakes against addr from parallel clients and reports
// the process's CPU per handshake.
func churn(b *testing.B, addr string) {
	b.ReportAllocs()
	b.SetParallelism(8)
	before := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var buf [512]byte
		for pb.Next() {
			if err := churnOnce(addr, buf[:]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
}

// churnOnce is one client's handshake, round trip and close.
func churnOnce(addr string, buf []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, churnRequest); err != nil {
		return err
	}
	n, err := readHead(c, buf)
	if err != nil {
		return fmt.Errorf("read 101: %w", err)
	}
	if !bytes.HasPrefix(buf, []byte("HTTP/1.1 101 ")) || !bytes.Contains(bytes.ToLower(buf[:n]), []byte(strings.ToLower("Sec-WebSocket-Accept: "+churnAccept+"\r\n"))) {
		return fmt.Errorf("not the 101 expected: %q", buf[:n])
	}
	// One round trip, then the close handshake: close 1000 out, the
	// node's close back.
	if err := exchange(c, churnFrame, []byte("\x81\x05hello"), buf); err != nil {
		return fmt.Errorf("round trip: %w", err)
	}
	if err := exchange(c, churnClose, []byte("\x88\x02\x03\xe8"), buf); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// exchange writes frame to c and reads want back, into buf.
func exchange(c net.Conn, frame, want, buf []byte) error {
	if _, err := c.Write(frame); err != nil {
		return err
	}
	got := 0
	for got < len(want) {
		k, err := c.Read(buf[got:])
		if err != nil {
			return err
		}
		got += k
	}
	if !bytes.Equal(buf[:got], want) {
		return fmt.Errorf("got %q, want %q", buf[:got], want)
	}
	return nil
}

// readHead reads from c into buf until the end of an HTTP head, which it
// returns the length of; bytes past it are not expected.
func readHead(c net.Conn, buf []byte) (int, error) {
	n := 0
	for {
		k, err := c.Read(buf[n:])
		n += k
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 {
			if i+4 != n {
				return 0, fmt.Errorf("%d bytes after the head: %q", n-i-4, buf[:n])
			}
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		if n == len(buf) {
			return 0, errors.New("head too long")
		}
	}
}

// echoNode is a minimal WebSocket node on loopback: it answers each
// upgrade with a 101 (any request path, no health endpoint needed as the
// pool has no checks), then echoes each masked frame of under 126 bytes
// unmasked, until it has echoed a close frame or the peer closes.
type echoNode struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup
}

func newEchoNode(b *testing.B) *echoNode {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	n := &echoNode{addr: ln.Addr().String(), ln: ln}
	n.wg.Add(1)
	go n.serve()
	b.Cleanup(func() { _ = ln.Close(); n.wg.Wait() })
	return n
}

func (n *echoNode) serve() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		go n.conn(c)
	}
}

// conn serves one connection.
func (n *echoNode) conn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var buf [2048]byte
	h, err := readHead(c, buf[:])
	if err != nil {
		return
	}
	const keyHdr = "\r\nsec-websocket-key: "
	head := buf[:h]
	i := bytes.Index(bytes.ToLower(head), []byte(keyHdr))
	if i < 0 {
		return
	}
	key := head[i+len(keyHdr) : i+len(keyHdr)+24]
	var out [160]byte
	r := append(out[:0], "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	r = append(r, upgrade.AcceptKey(key)...)
	r = append(r, "\r\n\r\n"...)
	if _, err := c.Write(r); err != nil {
		return
	}
	for {
		if _, err := io.ReadFull(c, buf[:6]); err != nil {
			return
		}
		n := int(buf[1] & 0x7f)
		if buf[1]&0x80 == 0 || n >= 126 {
			return
		}
		if _, err := io.ReadFull(c, buf[6:6+n]); err != nil {
			return
		}
		for j := range n {
			buf[6+j] ^= buf[j%4+2]
		}
		// The echo's header goes over the mask, no longer needed.
		buf[4], buf[5] = buf[0], byte(n)
		if _, err := c.Write(buf[4 : 6+n]); err != nil || buf[0]&0x0f == 0x8 {
			return
		}
	}
}

// cpuTime is the process's user and system CPU so far, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
