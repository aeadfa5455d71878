package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/wsgate/wsgate/gateway/internal/upstream/h2"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// h2Node is a scripted HTTP/2 node for the tunnels to HTTP/2 streams:
// it records what it reads and flags DATA after END_STREAM or RST_STREAM.
type h2Node struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex
	bw   *bufio.Writer
	wfr  *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	// frames the node read
	mu   sync.Mutex
	data map[uint32][]byte
	ends map[uint32]bool
	rsts map[uint32]http2.ErrCode
	hdrs chan uint32
}

// dialH2Node connects a polled h2.Conn to a new h2Node.
func dialH2Node(t *testing.T, cfg h2.Config, settings ...http2.Setting) (*h2.Conn, *h2Node) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	n := &h2Node{t: t, nc: server, data: map[uint32][]byte{}, ends: map[uint32]bool{}, rsts: map[uint32]http2.ErrCode{}, hdrs: make(chan uint32, 100)}
	n.fr = http2.NewFramer(io.Discard, server)
	n.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	n.bw = bufio.NewWriterSize(server, 1<<20)
	n.wfr = http2.NewFramer(n.bw, nil)
	n.enc = hpack.NewEncoder(&n.hbuf)
	settings = append(settings, http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
	n.wfr.WriteSettings(settings...)
	n.bw.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := h2.HandshakePolled(ctx, client, cfg, func(nc net.Conn, c *h2.Conn) (any, func()) { return AttachConn(nc, c) })
	if err != nil {
		t.Fatal(err)
	}
	if !c.Polled() {
		t.Fatal("not polled")
	}
	t.Cleanup(func() { c.Close() })
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(server, preface); err != nil {
		t.Fatal(err)
	}
	go n.readLoop()
	return c, n
}

// readLoop reads what the gateway sends until the connection ends.
func (n *h2Node) readLoop() {
	for {
		f, err := n.fr.ReadFrame()
		if err != nil {
			return
		}
		n.mu.Lock()
		switch f := f.(type) {
		case *http2.DataFrame:
			n.data[f.StreamID] = append(n.data[f.StreamID], f.Data()...)
			if n.ends[f.StreamID] {
				n.t.Errorf("DATA after END_STREAM on %d", f.StreamID)
			}
			if _, ok := n.rsts[f.StreamID]; ok {
				n.t.Errorf("DATA after RST_STREAM on %d", f.StreamID)
			}
			if f.StreamEnded() {
				n.ends[f.StreamID] = true
			}
		case *http2.RSTStreamFrame:
			n.rsts[f.StreamID] = f.ErrCode
		case *http2.MetaHeadersFrame:
			n.hdrs <- f.StreamID
		case *http2.SettingsFrame:
			if !f.IsAck() {
				n.do(func(fr *http2.Framer) { fr.WriteSettingsAck() })
			}
		}
		n.mu.Unlock()
	}
}

// do runs write with the node's framer and sends what it wrote in one write.
func (n *h2Node) do(write func(fr *http2.Framer)) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	write(n.wfr)
	n.bw.Flush()
}

// headers writes a response HEADERS frame of fields on stream id.
func (n *h2Node) headers(id uint32, end bool, fields ...string) func(fr *http2.Framer) {
	return func(fr *http2.Framer) {
		n.hbuf.Reset()
		for i := 0; i < len(fields); i += 2 {
			n.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: n.hbuf.Bytes(), EndHeaders: true, EndStream: end})
	}
}

// open opens a WebSocket stream on c and answers it 200.
func (n *h2Node) open(t *testing.T, c *h2.Conn) *h2.Stream {
	type res struct {
		s   *h2.Stream
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, _, err := c.OpenWebSocket(ctx, &h2.Request{Authority: "n", Path: "/"})
		ch <- res{s, err}
	}()
	var id uint32
	select {
	case id = <-n.hdrs:
	case <-time.After(10 * time.Second):
		t.Fatal("no HEADERS")
	}
	n.do(n.headers(id, false, ":status", "200"))
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.s
}

// h2Tunnel starts a tunnel between a test client and stream s.
func h2Tunnel(t *testing.T, s *h2.Stream) (*Tunnel, net.Conn, *bufio.Reader) {
	client, gwClient := tcpPair(t)
	tun := New(Params{Client: gwClient, Node: s, CloseTimeout: 30 * time.Second})
	tun.Start()
	if want := map[Engine]string{EngineAuto: "epoll", EngineGoroutines: "goroutines"}[testEngine]; tun.Engine() != want {
		t.Fatalf("engine %s, want %s", tun.Engine(), want)
	}
	return tun, client, bufio.NewReader(client)
}

// TestNodeStreamEndsWithItsLastBytes: the node sends a WebSocket frame and
// ends its stream in one read of the connection (an empty DATA with
// END_STREAM after it, or END_STREAM on the frame's own DATA). The client
// gets the frame, then the gateway's 1012, as when the end comes alone:
// the end raises no notification of its own once the bytes' has been
// taken.
func TestNodeStreamEndsWithItsLastBytes(t *testing.T) {
	skipH2Tunnel(t)
	for _, c := range []struct {
		name string
		end  func(n *h2Node, id uint32, msg []byte) func(fr *http2.Framer)
	}{
		{"empty DATA after", func(n *h2Node, id uint32, msg []byte) func(fr *http2.Framer) {
			return func(fr *http2.Framer) {
				fr.WriteData(id, false, msg)
				fr.WriteData(id, true, nil)
			}
		}},
		{"on the same DATA", func(n *h2Node, id uint32, msg []byte) func(fr *http2.Framer) {
			return func(fr *http2.Framer) { fr.WriteData(id, true, msg) }
		}},
		{"in a read of its own", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, n := dialH2Node(t, h2.Config{})
			s := n.open(t, conn)
			_, client, cr := h2Tunnel(t, s)
			msg := frame(wsframe.OpBinary, true, false, []byte("hello"))
			if c.end != nil {
				n.do(c.end(n, s.ID(), msg))
			} else {
				n.do(func(fr *http2.Framer) { fr.WriteData(s.ID(), false, msg) })
			}
			if h, p := readFrame(t, client, cr); h.Op != wsframe.OpBinary || string(p) != "hello" {
				t.Fatalf("got %v %q, want the node's frame", h.Op, p)
			}
			if c.end == nil {
				n.do(func(fr *http2.Framer) { fr.WriteData(s.ID(), true, nil) })
			}
			expectClose(t, client, cr, CodeServiceRestart, false)
		})
	}
}

// countingStream counts a NodeStream's WriteNB calls.
type countingStream struct {
	*h2.Stream
	writes *atomic.Int64
}

func (s countingStream) WriteNB(b [][]byte) (int, error) {
	s.writes.Add(1)
	return s.Stream.WriteNB(b)
}

// TestNodeStreamWaitingForWindowDoesNotSpin: a tunnel whose stream alone
// waits for the connection's window, poked by a frame from the node, tries
// its write a few times, not without end: leaving the waiters must not
// wake the stream that leaves.
func TestNodeStreamWaitingForWindowDoesNotSpin(t *testing.T) {
	skipH2Tunnel(t)
	if testEngine == EngineGoroutines {
		t.Skip("WriteNB is the poller's")
	}
	conn, n := dialH2Node(t, h2.Config{})
	s := n.open(t, conn)
	var writes atomic.Int64
	client, gwClient := tcpPair(t)
	tun := New(Params{Client: gwClient, Node: countingStream{s, &writes}, CloseTimeout: 30 * time.Second})
	tun.Start()
	cr := bufio.NewReader(client)
	// 100 KiB to the node: the connection's 65,535 bytes go, the rest waits.
	client.Write(frame(wsframe.OpBinary, true, true, make([]byte, 100<<10)))
	waitFor(t, func() bool { // the node gets the connection's window
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.data[s.ID()]) >= 65535
	})
	before := writes.Load()
	n.do(func(fr *http2.Framer) { fr.WriteData(s.ID(), false, frame(wsframe.OpText, true, false, []byte("hi"))) })
	readFrame(t, client, cr)
	time.Sleep(200 * time.Millisecond)
	if got := writes.Load() - before; got > 10 {
		t.Errorf("%d WriteNB calls after one poke: the poller spins on a stream waiting for the connection's window", got)
	}
	_ = tun
}

// skipH2Tunnel skips where the tunnels' clients are TLS (their tunnels run
// on goroutines, covered by the gateway's h2 tests).
func skipH2Tunnel(t *testing.T) {
	if testTLS {
		t.Skip("the client is TLS")
	}
}
