package tunnel

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// discardConn is a net.Conn whose writes vanish, so a benchmark of the
// forward path measures the gateway's own work per frame, not the kernel's.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error)      { return len(p), nil }
func (discardConn) Close() error                     { return nil }
func (discardConn) SetDeadline(time.Time) error      { return nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkForward measures one direction's per-frame cost (scan, count,
// write) on reads of 64 small masked frames, as a chatty client sends them.
// ns/op is per frame.
func BenchmarkForward(b *testing.B) {
	var chunk []byte
	const frames = 64
	for range frames {
		chunk = append(chunk, frame(wsframe.OpBinary, true, true, make([]byte, 64))...)
	}
	t := &Tunnel{}
	h := &t.toNode
	h.t = t
	s := new(stream)
	t.eng = s
	s.toNode.init(h, nil, discardConn{})
	h.sc = wsframe.Scanner{RequireMasked: true, MaxPayload: 1 << 20}
	b.SetBytes(int64(len(chunk) / frames))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += frames {
		h.forward(&s.toNode.ob, chunk)
	}
}

// BenchmarkForwardTCP is BenchmarkForward with a loopback TCP socket as
// the destination, read by a goroutine: the cost of one forward of a read
// of 8 small frames, syscall included. ns/op is per forward.
func BenchmarkForwardTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	dst, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()
	var chunk []byte
	for range 8 {
		chunk = append(chunk, frame(wsframe.OpBinary, true, true, make([]byte, 64))...)
	}
	t := &Tunnel{}
	h := &t.toNode
	h.t = t
	s := new(stream)
	t.eng = s
	s.toNode.init(h, nil, dst)
	h.sc = wsframe.Scanner{RequireMasked: true, MaxPayload: 1 << 20}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.forward(&s.toNode.ob, chunk)
	}
}

// BenchmarkTunnelFrames sends small masked frames from a client through a
// whole tunnel, on whichever engine the suite runs (the event-driven one by
// default, WSGATE_TUNNEL_ENGINE=goroutines for the other), to a node that
// reads them: allocs/op counts every allocation in the process per
// forwarded frame, the test's own client and node included (they allocate
// nothing per frame). ns/op is per frame, syscalls and scheduling included.
func BenchmarkTunnelFrames(b *testing.B) {
	client, gwClient := clientPair(b)
	gwNode, node := tcpPair(b)
	tun := New(Params{Client: gwClient, Node: gwNode})
	tun.Start()
	defer tun.Abort()
	const batch = 16
	var chunk []byte
	for range batch {
		chunk = append(chunk, frame(wsframe.OpBinary, true, true, make([]byte, 64))...)
	}
	var received atomic.Int64
	go func() { // the node: counts what arrives until the tunnel ends
		buf := make([]byte, 64<<10)
		for {
			k, err := node.Read(buf)
			received.Add(int64(k))
			if err != nil {
				return
			}
		}
	}()
	want := int64(0)
	b.SetBytes(int64(len(chunk) / batch))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if _, err := client.Write(chunk); err != nil {
			b.Fatal(err)
		}
		want += int64(len(chunk)) // the node receives the frames as sent
	}
	for received.Load() < want {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
}
