package relay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// clientFrame encodes a client's masked frame.
func clientFrame(fin bool, op wsframe.Opcode, payload []byte) []byte {
	key := [4]byte{0x11, 0x22, 0x33, 0x44}
	b := wsframe.AppendHeader(nil, wsframe.Header{Fin: fin, Op: op, Masked: true, Mask: key, Length: uint64(len(payload))})
	start := len(b)
	b = append(b, payload...)
	wsframe.Mask(key, 0, b[start:])
	return b
}

// parseAll feeds p to a frameReader in pieces of at most step bytes (all
// of it when step is 0) and returns what it found, one line per event and
// the error last.
func parseAll(limit int64, p []byte, step int) []string {
	f := &frameReader{limit: limit}
	var out []string
	in := append([]byte(nil), p...) // next unmasks in place
	for len(in) > 0 {
		k := len(in)
		if step > 0 {
			k = min(k, step)
		}
		chunk := in[:k]
		in = in[k:]
		for len(chunk) > 0 {
			n, ev, err := f.next(chunk)
			if n < 0 || n > len(chunk) || n == 0 && err == nil && ev.kind == evNone {
				return append(out, fmt.Sprintf("bad count %d of %d", n, len(chunk)))
			}
			chunk = chunk[n:]
			if err != nil {
				return append(out, err.Error())
			}
			if ev.kind != evNone {
				out = append(out, fmt.Sprintf("%d %d %q", ev.kind, ev.typ, ev.data))
			}
		}
	}
	if !f.idle() {
		out = append(out, "partial")
	}
	return out
}

func TestFrameReader(t *testing.T) {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	big := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpBinary, Masked: true, Length: 1 << 30})
	unmasked := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpText, Length: 2})
	unmasked = append(unmasked, "hi"...)
	rsv := clientFrame(true, wsframe.OpText, []byte("hi"))
	rsv[0] |= 0x40
	opcode := clientFrame(true, wsframe.OpText, []byte("hi"))
	opcode[0] = opcode[0]&^0xF | 0x3
	// A 2-byte length field holding 5: not the shortest form.
	long := []byte{0x81, 0xFE, 0, 5, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'}
	for _, tc := range []struct {
		name string
		in   []byte
		want []string
	}{
		{"text", clientFrame(true, wsframe.OpText, []byte("hello")), []string{`1 1 "hello"`}},
		{"empty binary", clientFrame(true, wsframe.OpBinary, nil), []string{`1 2 ""`}},
		{"fragments around a ping", cat(
			clientFrame(false, wsframe.OpText, []byte("he")),
			clientFrame(true, wsframe.OpPing, []byte("p")),
			clientFrame(false, wsframe.OpContinuation, []byte("l")),
			clientFrame(true, wsframe.OpContinuation, []byte("lo")),
			clientFrame(true, wsframe.OpPong, nil),
			clientFrame(true, wsframe.OpClose, []byte{3, 232})),
			[]string{`2 0 "p"`, `1 1 "hello"`, `3 0 ""`, `4 0 "\x03\xe8"`}},
		{"at the limit", clientFrame(true, wsframe.OpBinary, make([]byte, 16)), []string{fmt.Sprintf(`1 2 %q`, make([]byte, 16))}},
		{"over the limit", clientFrame(true, wsframe.OpBinary, make([]byte, 17)), []string{errReadLimit.Error()}},
		{"over the limit in fragments", cat(
			clientFrame(false, wsframe.OpBinary, make([]byte, 9)),
			clientFrame(true, wsframe.OpContinuation, make([]byte, 9))),
			[]string{errReadLimit.Error()}},
		{"1 GiB header", big, []string{errReadLimit.Error()}},
		{"unmasked", unmasked, []string{"websocket frame refused with 1002: incorrect mask flag"}},
		{"reserved bit", rsv, []string{"websocket frame refused with 1002: unexpected reserved bits 0x40"}},
		{"reserved opcode", opcode, []string{"websocket frame refused with 1002: unknown opcode"}},
		{"long length form", long, []string{"websocket frame refused with 1002: invalid frame length"}},
		{"continuation first", clientFrame(true, wsframe.OpContinuation, []byte("x")), []string{"websocket frame refused with 1002: continuation after FIN"}},
		{"message inside a message", cat(
			clientFrame(false, wsframe.OpText, []byte("a")),
			clientFrame(true, wsframe.OpBinary, []byte("b"))),
			[]string{"websocket frame refused with 1002: data before FIN"}},
		{"fragmented ping", clientFrame(false, wsframe.OpPing, nil), []string{"websocket frame refused with 1002: control frame not final"}},
		{"long ping", clientFrame(true, wsframe.OpPing, make([]byte, 126)), []string{"websocket frame refused with 1002: control frame length > 125"}},
		{"half a header", clientFrame(true, wsframe.OpText, []byte("hi"))[:3], []string{"partial"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{0, 1, 2, 5} {
				got := parseAll(16, tc.in, step)
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("fed %d bytes at a time: got %q, want %q", step, got, tc.want)
				}
			}
		})
	}
}

// TestFrameReaderHugeLengthAllocates pins that a header announcing 1 GiB
// is refused before anything of that size is allocated.
func TestFrameReaderHugeLengthAllocates(t *testing.T) {
	h := wsframe.AppendHeader(nil, wsframe.Header{Fin: true, Op: wsframe.OpBinary, Masked: true, Length: 1 << 30})
	allocs := testing.AllocsPerRun(10, func() {
		f := frameReader{limit: 1 << 20}
		_, _, _ = f.next(append([]byte(nil), h...))
	})
	if allocs > 2 {
		t.Fatalf("%v allocations for a refused header", allocs)
	}
	f := frameReader{} // no limit: the payload grows as it arrives
	p := append(h, 1, 2, 3)
	if n, ev, err := f.next(p); n != len(p) || ev.kind != evNone || err != nil || cap(f.msg) > 64 {
		t.Fatalf("next = %d %v %v, holding %d bytes", n, ev, err, cap(f.msg))
	}
}

// FuzzFrameReader feeds arbitrary bytes whole and in pieces: the reader
// must not panic, must find the same events and error however the bytes
// are split, and must hold no message over its limit.
func FuzzFrameReader(f *testing.F) {
	f.Add(clientFrame(true, wsframe.OpText, []byte("hello")), uint8(1))
	f.Add(bytes.Join([][]byte{
		clientFrame(false, wsframe.OpBinary, []byte("ab")),
		clientFrame(true, wsframe.OpPing, []byte("p")),
		clientFrame(true, wsframe.OpContinuation, []byte("c")),
		clientFrame(true, wsframe.OpClose, []byte{3, 232, 'x'}),
	}, nil), uint8(3))
	f.Add(binary.BigEndian.AppendUint64([]byte{0x82, 0xFF}, 1<<40), uint8(2))
	f.Add([]byte{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}, uint8(0))
	f.Fuzz(func(t *testing.T, p []byte, step uint8) {
		const limit = 64
		whole := parseAll(limit, p, 0)
		split := parseAll(limit, p, int(step%17)+1)
		if fmt.Sprint(whole) != fmt.Sprint(split) {
			t.Fatalf("whole: %q\nsplit by %d: %q", whole, step%17+1, split)
		}
		fr := &frameReader{limit: limit}
		in := append([]byte(nil), p...)
		for range len(p) + 1 {
			n, ev, err := fr.next(in)
			if len(fr.msg) > limit || len(ev.data) > limit && ev.kind == evMessage || len(ev.data) > 125 && ev.kind != evMessage {
				t.Fatalf("holding %d bytes, event of %d", len(fr.msg), len(ev.data))
			}
			in = in[n:]
			if err != nil || len(in) == 0 {
				return
			}
		}
		t.Fatal("no progress")
	})
}
