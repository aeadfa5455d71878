package wsframe

import (
	"bytes"
	"reflect"
	"testing"
	"unicode/utf8"
)

// headerSeeds are frame headers (and whole frames) worth starting from.
func headerSeeds() [][]byte {
	return [][]byte{
		{0x81, 0x00},
		{0x82, 125},
		{0x82, 126, 0x00, 126},
		{0x82, 126, 0x00, 0x05},
		{0x02, 127, 0, 0, 0, 0, 0, 1, 0, 0},
		{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0},
		{0x81, 0xFE, 0x01, 0x2C, 0x11, 0x22, 0x33, 0x44},
		{0x82, 0xFF, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4},
		{0x83, 0x00},
		{0x09, 0x00},
		{0x89, 126, 0, 200},
		{0xF1, 0x00},
		{0x81},
		{},
	}
}

func FuzzParseHeader(f *testing.F) {
	for _, s := range headerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		h, n, err := ParseHeader(p)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n = %d", err, n)
			}
			return
		}
		if n < 2 || n > MaxHeaderLen || n > len(p) || n != h.EncodedLen() {
			t.Fatalf("n = %d, EncodedLen = %d, len(p) = %d", n, h.EncodedLen(), len(p))
		}
		// Valid headers use the minimal encoding, so re-encoding yields
		// the same bytes, which parse back to the same header.
		enc := AppendHeader(nil, h)
		if !bytes.Equal(enc, p[:n]) {
			t.Fatalf("AppendHeader(%+v) = % x, input % x", h, enc, p[:n])
		}
		h2, n2, err := ParseHeader(enc)
		if err != nil || n2 != n || h2 != h {
			t.Fatalf("re-parse = %+v, %d, %v; want %+v, %d", h2, n2, err, h, n)
		}
	})
}

// chunker turns fuzz bytes into chunk sizes (1-64), cycling.
func chunker(sizes []byte) func() int {
	i := 0
	return func() int {
		if len(sizes) == 0 {
			return 1
		}
		s := int(sizes[i%len(sizes)]&63) + 1
		i++
		return s
	}
}

func FuzzScanner(f *testing.F) {
	for _, s := range headerSeeds() {
		f.Add(s, []byte{1}, uint8(0))
	}
	f.Add(concat(uframe(false, OpText, 3), uframe(true, OpPing, 1), uframe(true, OpContinuation, 2)), []byte{0, 3, 9}, uint8(0))
	f.Add(concat(AppendClose(nil, 1001, "bye", &testKey), AppendClose(nil, 1005, "", &testKey)), []byte{2, 5}, uint8(1))
	f.Add(concat(uframe(true, OpText, 0), closeFrame(0x03)), []byte{7}, uint8(2))
	f.Add(concat(uframe(false, OpBinary, 1), uframe(true, OpText, 1)), []byte{1}, uint8(3))
	f.Add(concat(uframe(true, OpContinuation, 1)), []byte{63}, uint8(4))
	f.Fuzz(func(t *testing.T, stream, sizes []byte, flags uint8) {
		cfg := Scanner{
			RequireMasked: flags&1 != 0,
			RejectMasked:  flags&2 != 0,
		}
		if flags&4 != 0 {
			cfg.MaxPayload = uint64(flags >> 3)
		}
		ref := scan(cfg, stream, whole)
		if got := scan(cfg, stream, bytewise); !reflect.DeepEqual(got, ref) {
			t.Fatalf("bytewise %+v\nwhole    %+v", got, ref)
		}
		if got := scan(cfg, stream, chunker(sizes)); !reflect.DeepEqual(got, ref) {
			t.Fatalf("chunked %+v\nwhole   %+v", got, ref)
		}
		// Every reported frame starts with a header ParseHeader accepts,
		// and ends where that header says.
		start := 0
		for _, e := range ref.Events {
			h, n, err := ParseHeader(stream[start:])
			if err != nil || h != e.H || start+n+int(h.Length) != e.Off {
				t.Fatalf("frame at %d: ParseHeader = %+v, %d, %v; scanner %v", start, h, n, err, e)
			}
			start = e.Off
		}
	})
}

func FuzzParseClosePayload(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x03})
	f.Add([]byte{0x03, 0xE8})
	f.Add(append([]byte{0x03, 0xE9}, "going away"...))
	f.Add([]byte{0x03, 0xED})
	f.Add([]byte{0x03, 0xE8, 0xFF})
	f.Add(append([]byte{0x0F, 0xA0}, "日本"...))
	f.Fuzz(func(t *testing.T, p []byte) {
		code, reason, err := ParseClosePayload(p)
		if err != nil {
			return
		}
		if !utf8.ValidString(reason) {
			t.Fatalf("accepted invalid UTF-8 reason %q", reason)
		}
		if len(p) == 0 {
			if code != CloseNoStatus || reason != "" {
				t.Fatalf("empty payload = %d %q", code, reason)
			}
			return
		}
		if !ValidCloseCode(code) {
			t.Fatalf("accepted invalid code %d", code)
		}
		if len(p) > 125 {
			return // too long for a control frame; AppendClose would cut it
		}
		// A valid payload survives AppendClose and the Scanner unchanged.
		wire := AppendClose(nil, code, reason, &testKey)
		s := Scanner{RequireMasked: true}
		n, end, err := s.Advance(wire)
		if err != nil || !end || n != len(wire) || s.CloseCode() != code {
			t.Fatalf("Advance = %d, %v, %v, code %d", n, end, err, s.CloseCode())
		}
		payload := wire[n-len(p):]
		Mask(testKey, 0, payload)
		if !bytes.Equal(payload, p) {
			t.Fatalf("payload % x, want % x", payload, p)
		}
	})
}
