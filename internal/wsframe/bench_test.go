package wsframe

import (
	"bytes"
	"testing"
)

// benchStream returns about 1 MiB of masked frames with payloads of size
// bytes each.
func benchStream(size int) []byte {
	one := frame(Header{Fin: true, Op: OpBinary, Masked: true, Mask: testKey}, bytes.Repeat([]byte{'b'}, size))
	return bytes.Repeat(one, max(1, (1<<20)/len(one)))
}

func benchmarkAdvance(b *testing.B, size int) {
	stream := benchStream(size)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		s := Scanner{RequireMasked: true}
		for p := stream; len(p) > 0; {
			n, _, err := s.Advance(p)
			if err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
	}
}

func BenchmarkAdvance64(b *testing.B)  { benchmarkAdvance(b, 64) }
func BenchmarkAdvance16K(b *testing.B) { benchmarkAdvance(b, 16<<10) }

func BenchmarkParseHeader(b *testing.B) {
	wire := AppendHeader(nil, Header{Fin: true, Op: OpBinary, Masked: true, Mask: testKey, Length: 300})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseHeader(wire); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMask(b *testing.B) {
	p := make([]byte, 16<<10)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		Mask(testKey, 1, p)
	}
}
