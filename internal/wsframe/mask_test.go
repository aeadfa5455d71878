package wsframe

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// maskNaive is the byte-at-a-time definition from RFC 6455 section 5.3.
func maskNaive(key [4]byte, pos int, p []byte) int {
	for i := range p {
		p[i] ^= key[(pos+i)%4]
	}
	return (pos + len(p)) % 4
}

func TestMask(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := [4]byte{0xDE, 0xAD, 0xBE, 0xEF}
	for _, size := range []int{0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 64, 1000} {
		for pos := range 6 { // 4 and 5 check the mod-4 reduction
			t.Run(fmt.Sprintf("size %d pos %d", size, pos), func(t *testing.T) {
				src := make([]byte, size)
				for i := range src {
					src[i] = byte(rng.Uint32())
				}
				got, want := bytes.Clone(src), bytes.Clone(src)
				gp, wp := Mask(key, pos, got), maskNaive(key, pos, want)
				if !bytes.Equal(got, want) || gp != wp {
					t.Fatalf("Mask = % x, %d; want % x, %d", got, gp, want, wp)
				}
				// Masking twice restores the input.
				Mask(key, pos, got)
				if !bytes.Equal(got, src) {
					t.Fatalf("Mask twice did not restore the input")
				}
			})
		}
	}
}

func TestMaskSplit(t *testing.T) {
	key := [4]byte{1, 2, 4, 8}
	src := make([]byte, 100)
	for i := range src {
		src[i] = byte(i)
	}
	want := bytes.Clone(src)
	Mask(key, 0, want)
	for cut1 := 0; cut1 <= len(src); cut1 += 7 {
		for cut2 := cut1; cut2 <= len(src); cut2 += 13 {
			got := bytes.Clone(src)
			pos := Mask(key, 0, got[:cut1])
			pos = Mask(key, pos, got[cut1:cut2])
			Mask(key, pos, got[cut2:])
			if !bytes.Equal(got, want) {
				t.Fatalf("split at %d, %d differs", cut1, cut2)
			}
		}
	}
}
