package relay

import (
	"bytes"
	"regexp"
	"testing"
)

var roomRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func FuzzValidRoom(f *testing.F) {
	for _, s := range []string{"", "demo", "a b", "a/b", "é", "x:y-z_1.2", string(make([]byte, 129)), "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidRoom(s), roomRE.MatchString(s); got != want {
			t.Fatalf("ValidRoom(%q) = %v, want %v", s, got, want)
		}
	})
}

func TestValidRoom(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"demo", true},
		{"A-Z_a.z:09", true},
		{string(bytes.Repeat([]byte("r"), MaxRoomLen)), true},
		{"", false},
		{string(bytes.Repeat([]byte("r"), MaxRoomLen+1)), false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
		{"a?b", false},
	} {
		t.Run(tc.in[:min(len(tc.in), 16)], func(t *testing.T) {
			if got := ValidRoom(tc.in); got != tc.want {
				t.Fatalf("ValidRoom(%q) = %v", tc.in, got)
			}
		})
	}
}

func FuzzParseEnvelope(f *testing.F) {
	o := origin{1, 2, 3, 4, 5, 6, 7, 8}
	f.Add(appendEnvelope(nil, o, 7, 1, []byte("hello")))
	f.Add(appendEnvelope(nil, o, 1<<40, 2, []byte{0, 0xff}))
	f.Add(appendEnvelope(nil, o, 0, 2, nil))
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseEnvelope(b)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to the same bytes.
		if again := appendEnvelope(nil, e.origin, e.member, e.typ, e.data); !bytes.Equal(again, b) {
			t.Fatalf("round trip of %x gave %x", b, again)
		}
	})
}

func TestEnvelope(t *testing.T) {
	o := origin{9, 8, 7, 6, 5, 4, 3, 2}
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"text", appendEnvelope(nil, o, 3, 1, []byte("x")), true},
		{"binary empty", appendEnvelope(nil, o, 4, 2, nil), true},
		{"short", []byte{1, 1, 0}, false},
		{"version", append(append([]byte{1, 1}, o[:]...), 0, 0, 0, 0, 0, 0, 0, 0), false},
		{"close type", append(append([]byte{2, 8}, o[:]...), 0, 0, 0, 0, 0, 0, 0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := parseEnvelope(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("parseEnvelope(%x) err = %v", tc.in, err)
			}
			if tc.ok && e.origin != o {
				t.Fatalf("origin = %x", e.origin)
			}
		})
	}
}
