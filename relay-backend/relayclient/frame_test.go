package relayclient

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseSince(t *testing.T) {
	long := strings.Repeat("e", MaxEpochLen)
	for _, tc := range []struct {
		name string
		in   string
		want Since
		ok   bool
	}{
		{"plain", "abc.42", Since{"abc", 42}, true},
		{"zero offset", "E9.0", Since{"E9", 0}, true},
		{"max offset", "e.18446744073709551615", Since{"e", 1<<64 - 1}, true},
		{"longest epoch", long + ".1", Since{long, 1}, true},
		{"empty", "", Since{}, false},
		{"empty epoch", ".5", Since{}, false},
		{"empty offset", "abc.", Since{}, false},
		{"missing dot", "abc5", Since{}, false},
		{"two dots", "a.b.5", Since{}, false},
		{"bad epoch chars", "ab-c.5", Since{}, false},
		{"non-ascii epoch", "é.5", Since{}, false},
		{"space", "abc. 5", Since{}, false},
		{"negative", "abc.-1", Since{}, false},
		{"plus", "abc.+1", Since{}, false},
		{"overflow", "abc.18446744073709551616", Since{}, false},
		{"huge", "abc.99999999999999999999999", Since{}, false},
		{"leading zero", "abc.007", Since{}, false},
		{"hex", "abc.0x10", Since{}, false},
		{"epoch too long", long + "e.1", Since{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSince(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseSince(%q) err = %v", tc.in, err)
			}
			if !tc.ok {
				if !errors.Is(err, ErrBadSince) {
					t.Fatalf("err %v is not ErrBadSince", err)
				}
				return
			}
			if got != tc.want || got.String() != tc.in {
				t.Fatalf("ParseSince(%q) = %+v (%q)", tc.in, got, got.String())
			}
		})
	}
	if (Since{}).String() != "" || !(Since{}).IsZero() {
		t.Fatal("zero Since")
	}
}

func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"abc.42", "E9.0", ".5", "abc.", "abc", "a.b.5", "abc.-1", "abc.18446744073709551616", "abc.007", strings.Repeat("e", 65) + ".1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSince(s)
		if err != nil {
			return
		}
		if v.String() != s || !ValidEpoch(v.Epoch) {
			t.Fatalf("ParseSince(%q) = %+v, formats as %q", s, v, v.String())
		}
	})
}

func TestParseFrame(t *testing.T) {
	enc := func(f Frame) []byte { return AppendFrame(nil, f) }
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"msg text", enc(Frame{Kind: KindMsg, Type: TypeText, Offset: 1, Body: []byte("hi")}), true},
		{"msg binary empty", enc(Frame{Kind: KindMsg, Type: TypeBinary, Offset: 9}), true},
		{"pos", enc(Frame{Kind: KindPos, Body: []byte("ep0ch")}), true},
		{"resync", enc(Frame{Kind: KindResync, Body: []byte("E")}), true},
		{"live", enc(Frame{Kind: KindLive, Offset: 0}), true},
		{"ack", enc(Frame{Kind: KindAck, Offset: 3}), true},
		{"short", []byte{1, 1, 0, 0}, false},
		{"empty", nil, false},
		{"unknown kind", enc(Frame{Kind: 6}), false},
		{"kind zero", enc(Frame{Kind: 0}), false},
		{"msg no type", enc(Frame{Kind: KindMsg, Offset: 1}), false},
		{"msg close type", enc(Frame{Kind: KindMsg, Type: 8, Offset: 1}), false},
		{"msg offset 0", enc(Frame{Kind: KindMsg, Type: TypeText}), false},
		{"pos no epoch", enc(Frame{Kind: KindPos}), false},
		{"pos bad epoch", enc(Frame{Kind: KindPos, Body: []byte("a b")}), false},
		{"pos with type", enc(Frame{Kind: KindPos, Type: 1, Body: []byte("e")}), false},
		{"live body", enc(Frame{Kind: KindLive, Body: []byte("x")}), false},
		{"ack offset 0", enc(Frame{Kind: KindAck}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFrame(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseFrame(%x) = %+v, %v", tc.in, f, err)
			}
			if err != nil && !errors.Is(err, ErrBadFrame) {
				t.Fatalf("err %v is not ErrBadFrame", err)
			}
			if err == nil && !bytes.Equal(AppendFrame(nil, f), tc.in) {
				t.Fatalf("round trip of %x", tc.in)
			}
		})
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Frame{Kind: KindMsg, Type: TypeText, Offset: 1, Body: []byte("hi")}))
	f.Add(AppendFrame(nil, Frame{Kind: KindPos, Offset: 1 << 63, Body: []byte("ep0ch")}))
	f.Add(AppendFrame(nil, Frame{Kind: KindAck, Offset: 2}))
	f.Add(AppendFrame(nil, Frame{Kind: KindLive}))
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, '-'})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendFrame(nil, fr), b) {
			t.Fatalf("round trip of %x", b)
		}
		if fr.Kind.String()[0] == 'k' {
			t.Fatalf("accepted unknown kind %d", fr.Kind)
		}
	})
}
