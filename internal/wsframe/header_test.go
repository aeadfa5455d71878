package wsframe

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	key := [4]byte{0x11, 0x22, 0x33, 0x44}
	tests := []struct {
		name string
		h    Header
		wire []byte // expected encoding
	}{
		{"empty text", Header{Fin: true, Op: OpText}, []byte{0x81, 0x00}},
		{"len 125", Header{Fin: true, Op: OpBinary, Length: 125}, []byte{0x82, 125}},
		{"len 126", Header{Fin: true, Op: OpBinary, Length: 126}, []byte{0x82, 126, 0x00, 126}},
		{"len 65535", Header{Op: OpText, Length: 65535}, []byte{0x01, 126, 0xFF, 0xFF}},
		{"len 65536", Header{Fin: true, Op: OpBinary, Length: 65536}, []byte{0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
		{"len max", Header{Fin: true, Op: OpBinary, Length: 1<<63 - 1}, []byte{0x82, 127, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"masked 7-bit", Header{Fin: true, Op: OpText, Masked: true, Mask: key, Length: 5}, []byte{0x81, 0x85, 0x11, 0x22, 0x33, 0x44}},
		{"masked 16-bit", Header{Fin: true, Op: OpText, Masked: true, Mask: key, Length: 300}, []byte{0x81, 0xFE, 0x01, 0x2C, 0x11, 0x22, 0x33, 0x44}},
		{"masked 64-bit", Header{Op: OpBinary, Masked: true, Mask: key, Length: 1 << 32}, []byte{0x02, 0xFF, 0, 0, 0, 1, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44}},
		{"rsv1 deflate", Header{Fin: true, Rsv: 4, Op: OpText, Length: 3}, []byte{0xC1, 0x03}},
		{"all rsv", Header{Fin: true, Rsv: 7, Op: OpBinary}, []byte{0xF2, 0x00}},
		{"continuation", Header{Op: OpContinuation, Length: 1}, []byte{0x00, 0x01}},
		{"close", Header{Fin: true, Op: OpClose, Length: 2}, []byte{0x88, 0x02}},
		{"ping 125", Header{Fin: true, Op: OpPing, Length: 125}, []byte{0x89, 125}},
		{"pong", Header{Fin: true, Op: OpPong}, []byte{0x8A, 0x00}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendHeader([]byte("prefix"), tt.h)
			if !bytes.Equal(got[6:], tt.wire) || string(got[:6]) != "prefix" {
				t.Fatalf("AppendHeader = % x, want prefix + % x", got, tt.wire)
			}
			if n := tt.h.EncodedLen(); n != len(tt.wire) {
				t.Errorf("EncodedLen = %d, want %d", n, len(tt.wire))
			}
			// Trailing payload bytes must not be read as header.
			h, n, err := ParseHeader(append(tt.wire, 0xAA, 0xBB))
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if n != len(tt.wire) || h != tt.h {
				t.Errorf("ParseHeader = %+v, %d; want %+v, %d", h, n, tt.h, len(tt.wire))
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		wire []byte
		want error
	}{
		{"16-bit length 0", []byte{0x82, 126, 0, 0}, ErrBadLength},
		{"16-bit length 125", []byte{0x82, 126, 0, 125}, ErrBadLength},
		{"64-bit length 0", []byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0, 0}, ErrBadLength},
		{"64-bit length 126", []byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0, 126}, ErrBadLength},
		{"64-bit length 65535", []byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}, ErrBadLength},
		{"64-bit top bit", []byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, ErrBadLength},
		{"64-bit all ones masked", []byte{0x82, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3, 4}, ErrBadLength},
		{"fragmented close", []byte{0x08, 0x00}, ErrFragmentedControl},
		{"fragmented ping", []byte{0x09, 0x00}, ErrFragmentedControl},
		{"fragmented pong", []byte{0x0A, 0x00}, ErrFragmentedControl},
		{"ping 126", []byte{0x89, 126, 0, 126}, ErrControlTooLong},
		{"close 64-bit", []byte{0x88, 127, 0, 0, 0, 0, 0, 1, 0, 0}, ErrControlTooLong},
		{"pong non-minimal", []byte{0x8A, 126, 0, 5}, ErrBadLength},
	}
	for op := Opcode(0); op <= 0xF; op++ {
		if !op.valid() {
			tests = append(tests, struct {
				name string
				wire []byte
				want error
			}{fmt.Sprintf("reserved %v", op), []byte{0x80 | byte(op), 0x00}, ErrReservedOpcode})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, n, err := ParseHeader(tt.wire)
			if !errors.Is(err, tt.want) || n != 0 {
				t.Errorf("ParseHeader(% x) = n %d, err %v; want n 0, err %v", tt.wire, n, err, tt.want)
			}
			// A truncated bad header is only short: errors wait for the
			// whole header.
			for i := range len(tt.wire) {
				if _, n, err := ParseHeader(tt.wire[:i]); err != ErrShortHeader || n != 0 {
					t.Errorf("ParseHeader(first %d bytes) = %d, %v; want 0, ErrShortHeader", i, n, err)
				}
			}
		})
	}
}

func TestParseHeaderTruncated(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	for _, l := range []uint64{0, 125, 126, 65535, 65536, 1 << 40} {
		for _, masked := range []bool{false, true} {
			h := Header{Fin: true, Op: OpBinary, Masked: masked, Mask: key, Length: l}
			wire := AppendHeader(nil, h)
			t.Run(fmt.Sprintf("len %d masked %v", l, masked), func(t *testing.T) {
				for i := range len(wire) {
					if _, n, err := ParseHeader(wire[:i]); err != ErrShortHeader || n != 0 {
						t.Errorf("ParseHeader(first %d of %d bytes) = %d, %v; want 0, ErrShortHeader", i, len(wire), n, err)
					}
				}
				if _, n, err := ParseHeader(wire); err != nil || n != len(wire) {
					t.Errorf("ParseHeader(whole) = %d, %v", n, err)
				}
			})
		}
	}
}
