package h2

import (
	"io"
	"testing"

	"golang.org/x/net/http2"
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
