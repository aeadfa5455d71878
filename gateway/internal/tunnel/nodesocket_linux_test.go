package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
	"golang.org/x/sys/unix"
)

// useNodeSocket says whether the gateway's end of a rig's node connection
// is a NodeSocket (see nodePair): by default as the gateway dials a node
// without TLS, which is a NodeSocket for a client without TLS on the
// event-driven engine and a Go connection otherwise;
// WSGATE_NODE_SOCKET=1 or 0 makes it always one or never.
func useNodeSocket() bool {
	switch os.Getenv("WSGATE_NODE_SOCKET") {
	case "1":
		return true
	case "0":
		return false
	}
	return testEngine != EngineGoroutines
}

// dialSocket connects a bare non-blocking socket to addr and watches it,
// as upstream's Dialer.DialSocket and the gateway do (TCP_NODELAY
// included, as Go's sockets have it).
func dialSocket(t testing.TB, addr string) *NodeSocket {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		_ = unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil && err != unix.EINPROGRESS {
		_ = unix.Close(fd)
		t.Fatal(err)
	}
	s, err := WatchSocket(fd, ap)
	if err != nil {
		_ = unix.Close(fd)
		t.Fatal(err)
	}
	return s
}

// socketPair returns a NodeSocket connected to a loopback listener, and
// the listener's end.
func socketPair(t testing.TB) (*NodeSocket, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := dialSocket(t, ln.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	return s, c
}

// nodePair returns the gateway's end of a connection to a test node and
// the node's end: a NodeSocket when useNodeSocket says so, else TCP.
func nodePair(t testing.TB) (gw, node net.Conn) {
	if useNodeSocket() {
		return socketPair(t)
	}
	return tcpPair(t)
}

// registeredSockets counts the NodeSockets the pollers' tables hold.
func registeredSockets() int {
	n := 0
	for _, p := range pollers {
		p.smu.Lock()
		for _, s := range p.sockets {
			if s != nil {
				n++
			}
		}
		p.smu.Unlock()
	}
	return n
}

// TestNodeSocketConn pins the NodeSocket as a net.Conn before a tunnel
// takes it: writes and reads wait for the poller's events, a deadline
// ends a wait, moving it ends a wait at once, Close ends one with
// net.ErrClosed, and the node's close reads as io.EOF.
func TestNodeSocketConn(t *testing.T) {
	s, node := socketPair(t)
	if _, err := s.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadFull(node, buf[:18]); err != nil || string(buf[:3]) != "GET" {
		t.Fatalf("node read %q, %v", buf[:18], err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // the read below waits first, or finds it there: either is right
		_, _ = node.Write([]byte("answer"))
	}()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := s.Read(buf)
	if err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	_ = s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}

	// A deadline moved into the past ends a read waiting without one.
	_ = s.SetReadDeadline(time.Time{})
	got := make(chan error, 1)
	go func() { _, err := s.Read(buf); got <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = s.SetReadDeadline(time.Unix(1, 0))
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the deadline moved: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read waiting did not see its deadline move")
	}

	// Close ends a waiting read.
	_ = s.SetReadDeadline(time.Time{})
	go func() { _, err := s.Read(buf); got <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read across Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting read")
	}
	if err := s.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}

	s2, node2 := socketPair(t)
	_ = node2.Close()
	_ = s2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := s2.Read(buf); err != io.EOF {
		t.Fatalf("read after the node closed: %v, want io.EOF", err)
	}
}

// TestNodeSocketRefused pins a connect the node refuses: it shows on the
// first write, as the refusal the kernel got.
func TestNodeSocketRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	s := dialSocket(t, addr)
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.Write([]byte("GET / HTTP/1.1\r\n\r\n")); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("write to a refused connect: %v, want ECONNREFUSED", err)
	}
}

// TestNodeSocketTunnel runs a tunnel over a NodeSocket with the node's
// first frame already waiting (sent before the tunnel took the socket, so
// its edge went to the NodeSocket): on a poller for a client with a
// socket, on goroutines for one without; every NodeSocket is let go of
// afterwards.
func TestNodeSocketTunnel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t testing.TB) (net.Conn, net.Conn)
		engine string
	}{
		{"socket client", clientPair, "epoll"},
		{"client without a socket", func(t testing.TB) (net.Conn, net.Conn) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		}, "goroutines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engine := tc.engine
			switch {
			case testEngine == EngineGoroutines:
				engine = "goroutines"
			case testTLS && engine == "epoll":
				engine = EngineNameTLS
			}
			client, gwClient := tc.client(t)
			gwNode, node := socketPair(t)
			early := frame(wsframe.OpText, true, false, []byte("early"))
			if _, err := node.Write(early); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // its event reaches the NodeSocket
			lease := &countingLease{}
			tun := New(Params{Client: gwClient, Node: gwNode, CloseTimeout: 10 * time.Second, Lease: lease})
			tun.Start()
			if got := tun.Engine(); got != engine {
				t.Errorf("engine %q, want %q", got, engine)
			}
			cr, nr := bufio.NewReader(client), bufio.NewReader(node)
			_ = client.SetDeadline(time.Now().Add(10 * time.Second))
			_ = node.SetDeadline(time.Now().Add(10 * time.Second))
			if _, p := readFrame(t, client, cr); string(p) != "early" {
				t.Fatalf("client got %q first, want the node's early frame", p)
			}
			msg := bytes.Repeat([]byte("m"), 70000)
			go func() { _, _ = client.Write(frame(wsframe.OpBinary, true, true, msg)) }()
			if _, p := readFrame(t, node, nr); !bytes.Equal(p, msg) {
				t.Fatalf("node got %d bytes, want %d", len(p), len(msg))
			}
			go func() { _, _ = node.Write(frame(wsframe.OpBinary, true, false, msg)) }()
			if _, p := readFrame(t, client, cr); !bytes.Equal(p, msg) {
				t.Fatalf("client got %d bytes, want %d", len(p), len(msg))
			}
			go func() { _, _ = client.Write(wsframe.AppendClose(nil, 1000, "bye", &testMask)) }()
			expectClose(t, node, nr, 1000, true)
			go func() { _, _ = node.Write(wsframe.AppendClose(nil, 1000, "bye", nil)) }()
			expectClose(t, client, cr, 1000, false)
			select {
			case <-tun.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("tunnel did not end")
			}
			if lease.n.Load() != 1 {
				t.Fatalf("lease released %d times", lease.n.Load())
			}
			waitFor(t, func() bool { return registeredSockets() == 0 && NodeSockets() == 0 })
		})
	}
}

// setSockBuf sets the socket option opt (SO_RCVBUF, SO_SNDBUF) of c, a
// TCP connection or a NodeSocket, to n, as SetReadBuffer and
// SetWriteBuffer do.
func setSockBuf(c net.Conn, opt, n int) error {
	if s, ok := c.(*NodeSocket); ok {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, opt, n)
	}
	if opt == unix.SO_RCVBUF {
		return c.(*net.TCPConn).SetReadBuffer(n)
	}
	return c.(*net.TCPConn).SetWriteBuffer(n)
}

// TestNodeSocketTableShrinks pins that a burst of handshakes does not
// hold its table: once its NodeSockets are gone, no poller keeps more than
// socketsKept entries.
func TestNodeSocketTableShrinks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	n := 3 * socketsKept * max(len(pollers), 2)
	held := make([]*NodeSocket, 0, n)
	for range n {
		held = append(held, dialSocket(t, ln.Addr().String()))
	}
	longest := 0
	for _, p := range pollers {
		p.smu.Lock()
		longest = max(longest, len(p.sockets))
		p.smu.Unlock()
	}
	if longest <= socketsKept {
		t.Fatalf("the burst grew no table past %d (longest %d): the test does not reach the limit", socketsKept, longest)
	}
	for _, s := range held {
		_ = s.Close()
	}
	for _, p := range pollers {
		p.smu.Lock()
		if len(p.sockets) > socketsKept || len(p.freeSockets) > socketsKept {
			t.Errorf("a poller keeps %d entries (%d free) after the burst", len(p.sockets), len(p.freeSockets))
		}
		p.smu.Unlock()
	}
	if NodeSockets() != 0 {
		t.Fatalf("%d node sockets open", NodeSockets())
	}
}
