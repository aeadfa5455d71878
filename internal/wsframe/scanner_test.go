package wsframe

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"
)

var testKey = [4]byte{0xA1, 0xB2, 0xC3, 0xD4}

// uframe builds an unmasked frame with a payload of n bytes.
func uframe(fin bool, op Opcode, n int) []byte {
	return frame(Header{Fin: fin, Op: op}, bytes.Repeat([]byte{'p'}, n))
}

// mframe builds a masked frame with a payload of n bytes.
func mframe(fin bool, op Opcode, n int) []byte {
	return frame(Header{Fin: fin, Op: op, Masked: true, Mask: testKey}, bytes.Repeat([]byte{'p'}, n))
}

// closeFrame builds an unmasked close frame with the given raw payload.
func closeFrame(payload ...byte) []byte {
	return frame(Header{Fin: true, Op: OpClose}, payload)
}

// want describes one expected frame end: opcode, FIN, length, close code and
// InMessage after the frame.
type want struct {
	op    Opcode
	fin   bool
	len   uint64
	close uint16
	inMsg bool
}

func TestScanner(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Scanner
		stream  []byte
		want    []want
		wantErr error
	}{
		{
			name:   "single text",
			stream: uframe(true, OpText, 5),
			want:   []want{{op: OpText, fin: true, len: 5}},
		},
		{
			name:   "zero-length frames",
			stream: concat(uframe(true, OpBinary, 0), uframe(true, OpPing, 0), uframe(true, OpPong, 0)),
			want:   []want{{op: OpBinary, fin: true}, {op: OpPing, fin: true}, {op: OpPong, fin: true}},
		},
		{
			name:   "lengths 125 126 65535 65536",
			stream: concat(uframe(true, OpBinary, 125), uframe(true, OpBinary, 126), uframe(true, OpBinary, 65535), uframe(true, OpBinary, 65536)),
			want:   []want{{op: OpBinary, fin: true, len: 125}, {op: OpBinary, fin: true, len: 126}, {op: OpBinary, fin: true, len: 65535}, {op: OpBinary, fin: true, len: 65536}},
		},
		{
			name:   "fragmented message",
			stream: concat(uframe(false, OpText, 3), uframe(false, OpContinuation, 0), uframe(true, OpContinuation, 4), uframe(true, OpBinary, 1)),
			want: []want{
				{op: OpText, len: 3, inMsg: true},
				{op: OpContinuation, inMsg: true},
				{op: OpContinuation, fin: true, len: 4},
				{op: OpBinary, fin: true, len: 1},
			},
		},
		{
			name: "control frames between fragments",
			stream: concat(uframe(false, OpBinary, 10), uframe(true, OpPing, 4), uframe(false, OpContinuation, 10),
				uframe(true, OpPong, 0), closeFrame(0x03, 0xE9), uframe(true, OpContinuation, 1)),
			want: []want{
				{op: OpBinary, len: 10, inMsg: true},
				{op: OpPing, fin: true, len: 4, inMsg: true},
				{op: OpContinuation, len: 10, inMsg: true},
				{op: OpPong, fin: true, inMsg: true},
				{op: OpClose, fin: true, len: 2, close: 1001, inMsg: true},
				{op: OpContinuation, fin: true, len: 1},
			},
		},
		{
			name:   "close codes",
			stream: concat(closeFrame(), closeFrame(0x03, 0xE8, 'b', 'y', 'e'), AppendClose(nil, 1012, "restart", &testKey)),
			want: []want{
				{op: OpClose, fin: true, close: 1005},
				{op: OpClose, fin: true, len: 5, close: 1000},
				{op: OpClose, fin: true, len: 9, close: 1012},
			},
		},
		{
			name:   "invalid close code is reported as sent",
			stream: closeFrame(0x03, 0xE7),
			want:   []want{{op: OpClose, fin: true, len: 2, close: 999}},
		},
		{
			name:    "one-byte close payload",
			stream:  concat(uframe(true, OpText, 1), closeFrame(0x03)),
			want:    []want{{op: OpText, fin: true, len: 1}},
			wantErr: ErrBadClosePayload,
		},
		{
			name:   "rsv bits pass through",
			stream: concat(frame(Header{Fin: true, Rsv: 4, Op: OpText}, []byte("zz")), frame(Header{Fin: true, Rsv: 7, Op: OpPing}, nil)),
			want:   []want{{op: OpText, fin: true, len: 2}, {op: OpPing, fin: true}},
		},
		{
			name:   "masked client frames",
			cfg:    Scanner{RequireMasked: true},
			stream: concat(mframe(true, OpText, 200), mframe(true, OpClose, 2)),
			want:   []want{{op: OpText, fin: true, len: 200}, {op: OpClose, fin: true, len: 2, close: 0x7070}},
		},
		{
			name:    "unmasked from client",
			cfg:     Scanner{RequireMasked: true},
			stream:  concat(mframe(true, OpText, 1), uframe(true, OpText, 1)),
			want:    []want{{op: OpText, fin: true, len: 1}},
			wantErr: ErrUnmasked,
		},
		{
			name:    "masked from server",
			cfg:     Scanner{RejectMasked: true},
			stream:  concat(uframe(true, OpText, 1), mframe(true, OpPing, 1)),
			want:    []want{{op: OpText, fin: true, len: 1}},
			wantErr: ErrMasked,
		},
		{
			name:    "unexpected continuation",
			stream:  concat(uframe(true, OpText, 1), uframe(true, OpContinuation, 1)),
			want:    []want{{op: OpText, fin: true, len: 1}},
			wantErr: ErrUnexpectedContinuation,
		},
		{
			name:    "expected continuation",
			stream:  concat(uframe(false, OpText, 1), uframe(true, OpPing, 0), uframe(true, OpBinary, 1)),
			want:    []want{{op: OpText, len: 1, inMsg: true}, {op: OpPing, fin: true, inMsg: true}},
			wantErr: ErrExpectedContinuation,
		},
		{
			name:   "max payload allows equal",
			cfg:    Scanner{MaxPayload: 100},
			stream: uframe(true, OpBinary, 100),
			want:   []want{{op: OpBinary, fin: true, len: 100}},
		},
		{
			name:    "max payload exceeded",
			cfg:     Scanner{MaxPayload: 100},
			stream:  concat(uframe(true, OpBinary, 100), uframe(true, OpBinary, 101)),
			want:    []want{{op: OpBinary, fin: true, len: 100}},
			wantErr: ErrTooLarge,
		},
		{
			name:    "reserved opcode",
			stream:  concat(uframe(true, OpText, 0), []byte{0x83, 0x00}),
			want:    []want{{op: OpText, fin: true}},
			wantErr: ErrReservedOpcode,
		},
		{
			name:    "fragmented ping",
			stream:  []byte{0x09, 0x00},
			wantErr: ErrFragmentedControl,
		},
		{
			name:    "long ping",
			stream:  []byte{0x89, 126, 0, 200},
			wantErr: ErrControlTooLong,
		},
		{
			name:    "non-minimal length",
			stream:  []byte{0x82, 126, 0, 10},
			wantErr: ErrBadLength,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []struct {
				name string
				next func() int
			}{{"whole", whole}, {"bytewise", bytewise}, {"random", randomChunks(rand.New(rand.NewPCG(7, 7)), 40)}} {
				r := scan(tt.cfg, tt.stream, chunk.next)
				if r.Err != tt.wantErr {
					t.Errorf("%s: err = %v, want %v", chunk.name, r.Err, tt.wantErr)
				}
				if tt.wantErr == nil && r.Consumed != len(tt.stream) {
					t.Errorf("%s: consumed %d of %d", chunk.name, r.Consumed, len(tt.stream))
				}
				if len(r.Events) != len(tt.want) {
					t.Fatalf("%s: %d frames %v, want %d", chunk.name, len(r.Events), r.Events, len(tt.want))
				}
				for i, w := range tt.want {
					e := r.Events[i]
					got := want{op: e.H.Op, fin: e.H.Fin, len: e.H.Length, close: e.CloseCode, inMsg: e.InMessage}
					if got != w {
						t.Errorf("%s: frame %d = %+v, want %+v", chunk.name, i, got, w)
					}
				}
			}
		})
	}
}

func TestScannerZeroLengthFrameEndsAtHeader(t *testing.T) {
	for _, wire := range [][]byte{uframe(true, OpText, 0), mframe(true, OpPing, 0), closeFrame()} {
		t.Run(fmt.Sprintf("% x", wire), func(t *testing.T) {
			var s Scanner
			stream := append(bytes.Clone(wire), uframe(true, OpText, 3)...)
			n, end, err := s.Advance(stream)
			if n != len(wire) || !end || err != nil {
				t.Fatalf("Advance = %d, %v, %v; want %d, true, nil", n, end, err, len(wire))
			}
		})
	}
}

func TestScannerState(t *testing.T) {
	var s Scanner
	if !s.AtBoundary() || s.InMessage() || s.CloseCode() != 0 {
		t.Fatalf("zero Scanner: boundary %v, in message %v, close %d", s.AtBoundary(), s.InMessage(), s.CloseCode())
	}
	wire := closeFrame(0x03, 0xE9, 'x')
	steps := []struct {
		name     string
		p        []byte
		n        int
		end      bool
		boundary bool
		close    uint16
	}{
		{"first header byte", wire[:1], 1, false, false, 0},
		{"second header byte", wire[1:2], 1, false, false, 0},
		{"first code byte", wire[2:3], 1, false, false, 0},
		{"rest", wire[3:], 2, true, true, 1001},
		{"partial next header keeps code", []byte{0x81}, 1, false, false, 1001},
		{"next header completes", []byte{0x00}, 1, true, true, 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			n, end, err := s.Advance(st.p)
			if err != nil || n != st.n || end != st.end {
				t.Fatalf("Advance = %d, %v, %v; want %d, %v, nil", n, end, err, st.n, st.end)
			}
			if s.AtBoundary() != st.boundary || s.CloseCode() != st.close {
				t.Errorf("boundary %v close %d; want %v %d", s.AtBoundary(), s.CloseCode(), st.boundary, st.close)
			}
		})
	}
}

func TestScannerSize(t *testing.T) {
	// The type doc promises 56 bytes; the gateway holds two per tunnel.
	if size := unsafe.Sizeof(Scanner{}); size > 56 {
		t.Errorf("Scanner is %d bytes, documented as 56", size)
	}
}

// randomStream builds a valid stream of count frames: data messages, some
// fragmented, with control frames (including close frames) between
// fragments, and lengths that hit every length encoding.
func randomStream(rng *rand.Rand, count int, masked bool) []byte {
	lengths := []int{0, 1, 2, 7, 125, 126, 127, 1000, 65535, 65536, 70000}
	var out []byte
	inMsg := false
	for range count {
		h := Header{Masked: masked}
		if masked {
			h.Mask = [4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
		}
		var payload []byte
		switch r := rng.IntN(10); {
		case r < 3: // control frame
			h.Fin = true
			h.Op = []Opcode{OpPing, OpPong, OpClose}[rng.IntN(3)]
			n := []int{0, 2, 5, 125}[rng.IntN(4)]
			payload = make([]byte, n)
			if h.Op == OpClose && n >= 2 {
				payload[0], payload[1] = byte(rng.Uint32()), byte(rng.Uint32())
			}
		default: // data frame
			if inMsg {
				h.Op = OpContinuation
			} else {
				h.Op = []Opcode{OpText, OpBinary}[rng.IntN(2)]
			}
			h.Fin = rng.IntN(2) == 0
			h.Rsv = uint8(rng.IntN(8))
			inMsg = !h.Fin
			payload = make([]byte, lengths[rng.IntN(len(lengths))])
		}
		out = append(out, frame(h, payload)...)
	}
	return out
}

// TestScannerChunkingProperty feeds streams of many frames in several
// chunkings and checks that every chunking reports the same frames, at the
// same offsets, with the same close codes and message state.
func TestScannerChunkingProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	for i := range 20 {
		masked := i%2 == 0
		stream := randomStream(rng, 60, masked)
		cfg := Scanner{RequireMasked: masked, RejectMasked: !masked}
		t.Run(fmt.Sprintf("stream %d masked %v", i, masked), func(t *testing.T) {
			ref := scan(cfg, stream, whole)
			if ref.Err != nil || ref.Consumed != len(stream) || len(ref.Events) != 60 || !ref.Boundary {
				t.Fatalf("whole: err %v, consumed %d of %d, %d frames", ref.Err, ref.Consumed, len(stream), len(ref.Events))
			}
			chunkings := map[string]func() int{
				"random small": randomChunks(rng, 16),
				"random mid":   randomChunks(rng, 3000),
				"random large": randomChunks(rng, 100000),
			}
			if i < 2 { // one byte at a time is slow on 70 KB frames
				chunkings["bytewise"] = bytewise
			}
			for name, next := range chunkings {
				if got := scan(cfg, stream, next); !reflect.DeepEqual(got, ref) {
					t.Errorf("%s: result differs from whole-stream scan", name)
				}
			}
		})
	}
}

func TestScannerNoAlloc(t *testing.T) {
	stream := randomStream(rand.New(rand.NewPCG(3, 3)), 50, true)
	allocs := testing.AllocsPerRun(20, func() {
		s := Scanner{RequireMasked: true}
		for p := stream; len(p) > 0; {
			n, _, err := s.Advance(p)
			if err != nil || n == 0 {
				panic(err)
			}
			p = p[n:]
		}
	})
	if allocs != 0 {
		t.Errorf("Advance allocated %.1f times per stream", allocs)
	}
}
