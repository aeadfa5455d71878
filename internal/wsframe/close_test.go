package wsframe

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidCloseCode(t *testing.T) {
	tests := []struct {
		code uint16
		want bool
	}{
		{0, false}, {999, false}, {1000, true}, {1001, true}, {1002, true}, {1003, true},
		{1004, false}, {1005, false}, {1006, false}, {1007, true}, {1009, true},
		{1011, true}, {1012, true}, {1013, true}, {1014, true}, {1015, false},
		{1016, false}, {2999, false}, {3000, true}, {4000, true}, {4999, true},
		{5000, false}, {65535, false},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(int(tt.code)), func(t *testing.T) {
			if got := ValidCloseCode(tt.code); got != tt.want {
				t.Errorf("ValidCloseCode(%d) = %v, want %v", tt.code, got, tt.want)
			}
		})
	}
}

func TestParseClosePayload(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
		code    uint16
		reason  string
		want    error
	}{
		{"empty", nil, 1005, "", nil},
		{"one byte", []byte{0x03}, 0, "", ErrBadClosePayload},
		{"normal", []byte{0x03, 0xE8}, 1000, "", nil},
		{"going away with reason", append([]byte{0x03, 0xE9}, "restart"...), 1001, "restart", nil},
		{"try again later", []byte{0x03, 0xF5}, 1013, "", nil},
		{"application code", append([]byte{0x0F, 0xA0}, "héllo"...), 4000, "héllo", nil},
		{"code 999", []byte{0x03, 0xE7}, 999, "", ErrBadCloseCode},
		{"code 1005 on wire", []byte{0x03, 0xED}, 1005, "", ErrBadCloseCode},
		{"code 1006 on wire", []byte{0x03, 0xEE}, 1006, "", ErrBadCloseCode},
		{"code 5000", []byte{0x13, 0x88}, 5000, "", ErrBadCloseCode},
		{"bad utf-8", []byte{0x03, 0xE8, 0xFF, 0xFE}, 1000, "\xff\xfe", ErrBadCloseReason},
		{"truncated rune", []byte{0x03, 0xE8, 0xC3}, 1000, "\xc3", ErrBadCloseReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, reason, err := ParseClosePayload(tt.payload)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if code != tt.code || reason != tt.reason {
				t.Errorf("got %d %q, want %d %q", code, reason, tt.code, tt.reason)
			}
		})
	}
}

func TestAppendCloseRoundTrip(t *testing.T) {
	key := [4]byte{0x37, 0xFA, 0x21, 0x3D}
	long := strings.Repeat("x", 200)
	// 122 ASCII bytes then a 3-byte rune: the rune straddles byte 123 and
	// must be dropped whole.
	straddle := strings.Repeat("a", 122) + "€" + "tail"
	tests := []struct {
		name       string
		code       uint16
		reason     string
		wantReason string
		wantCode   uint16
	}{
		{"normal", 1000, "", "", 1000},
		{"going away", 1001, "server restart", "server restart", 1001},
		{"service restart", 1012, "", "", 1012},
		{"unicode", 4001, "日本語", "日本語", 4001},
		{"exactly 123", 1000, long[:123], long[:123], 1000},
		{"too long", 1000, long, long[:123], 1000},
		{"rune straddles cut", 1001, straddle, strings.Repeat("a", 122), 1001},
		{"no status", 1005, "ignored", "", 1005},
	}
	for _, tt := range tests {
		for _, masked := range []bool{false, true} {
			name := tt.name + " unmasked"
			var mask *[4]byte
			if masked {
				name, mask = tt.name+" masked", &key
			}
			t.Run(name, func(t *testing.T) {
				wire := AppendClose(nil, tt.code, tt.reason, mask)
				s := Scanner{RequireMasked: masked, RejectMasked: !masked}
				n, end, err := s.Advance(wire)
				if err != nil || !end || n != len(wire) {
					t.Fatalf("Advance = %d, %v, %v; want %d, true, nil", n, end, err, len(wire))
				}
				if got := s.CloseCode(); got != tt.wantCode {
					t.Errorf("CloseCode = %d, want %d", got, tt.wantCode)
				}
				h, hl, err := ParseHeader(wire)
				if err != nil || h.Op != OpClose || !h.Fin || h.Masked != masked || h.Length > 125 {
					t.Fatalf("ParseHeader = %+v, %v", h, err)
				}
				payload := wire[hl:]
				if masked {
					Mask(h.Mask, 0, payload)
				}
				code, reason, err := ParseClosePayload(payload)
				if err != nil || code != tt.wantCode || reason != tt.wantReason {
					t.Errorf("ParseClosePayload = %d %q %v; want %d %q", code, reason, err, tt.wantCode, tt.wantReason)
				}
				if !utf8.ValidString(reason) {
					t.Errorf("reason is not valid UTF-8")
				}
			})
		}
	}
}

func TestAppendCloseNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 256)
	key := [4]byte{1, 2, 3, 4}
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendClose(buf[:0], 1001, "going away", &key)
	})
	if allocs != 0 {
		t.Errorf("AppendClose allocated %.1f times per call", allocs)
	}
}
