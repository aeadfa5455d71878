package tunnel

import (
	"net"
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
	h.t, h.dst = t, discardConn{}
	h.sc = wsframe.Scanner{RequireMasked: true, MaxPayload: 1 << 20}
	b.SetBytes(int64(len(chunk) / frames))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += frames {
		h.forward(chunk)
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
	h.t, h.dst = t, dst
	h.sc = wsframe.Scanner{RequireMasked: true, MaxPayload: 1 << 20}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.forward(chunk)
	}
}
