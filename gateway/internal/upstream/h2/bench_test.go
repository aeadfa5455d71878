package h2

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkStreamRoundTrip sends a 200-byte message on a stream and reads
// it back from a scripted node that echoes each DATA frame and gives its
// window back. The allocations counted include the node's.
func BenchmarkStreamRoundTrip(b *testing.B) {
	c, n, err := newFakeNode(b, Config{}, xconnect)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	res := openAsync(c, &Request{Authority: "n", Path: "/"})
	hf := n.nextHeaders()
	n.respond(hf.StreamID, 1000, ":status", "200")
	r := <-res
	if r.err != nil {
		b.Fatal(r.err)
	}
	go func() {
		n.fr.SetReuseFrames()
		for {
			f, err := n.fr.ReadFrame()
			if err != nil {
				return
			}
			if d, ok := f.(*http2.DataFrame); ok && len(d.Data()) > 0 {
				k := uint32(len(d.Data()))
				n.fr.WriteData(d.StreamID, false, d.Data())
				n.fr.WriteWindowUpdate(0, k)
				n.fr.WriteWindowUpdate(d.StreamID, k)
			}
		}
	}()
	msg := make([]byte, 200)
	buf := make([]byte, 200)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := r.s.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r.s, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// countingConn counts the writes to the network.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// BenchmarkManyStreamsWrite has 64 streams on one connection write
// 200-byte messages at once, as the tunnels of one node's clients do in
// a busy room, to a node that reads everything and gives its window back.
// It reports the DATA frames each network write carries.
func BenchmarkManyStreamsWrite(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		// The node writes what it has once it has read all there was:
		// its own syscalls are not what is measured.
		br, bw := bufio.NewReaderSize(nc, 64<<10), bufio.NewWriterSize(nc, 64<<10)
		fr := http2.NewFramer(bw, br)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		var hbuf bytes.Buffer
		enc := hpack.NewEncoder(&hbuf)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		ok := hbuf.Bytes()
		fr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
		bw.Flush()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(br, preface); err != nil {
			return
		}
		for {
			if br.Buffered() == 0 && bw.Flush() != nil {
				return
			}
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: ok, EndHeaders: true})
			case *http2.DataFrame:
				if k := uint32(len(f.Data())); k > 0 {
					fr.WriteWindowUpdate(0, k)
					fr.WriteWindowUpdate(f.StreamID, k)
				}
			}
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	cc := &countingConn{Conn: raw}
	c, err := Handshake(context.Background(), cc, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const streams = 64
	ss := make([]*Stream, streams)
	for i := range ss {
		s, _, err := c.OpenWebSocket(context.Background(), &Request{Authority: "n", Path: "/"})
		if err != nil {
			b.Fatal(err)
		}
		ss[i] = s
	}
	msg := make([]byte, 200)
	b.SetBytes(int64(len(msg)))
	before := cc.writes.Load()
	var frames atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/streams + 1
	for _, s := range ss {
		wg.Go(func() {
			for range per {
				if _, err := s.Write(msg); err != nil {
					b.Error(err)
					return
				}
				frames.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(frames.Load())/float64(cc.writes.Load()-before), "frames/write")
}
