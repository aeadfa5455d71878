package roomlog

import (
	"bytes"
	"errors"
	"testing"
)

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Entry
		ok   bool
	}{
		{"1 abc hello", Entry{Epoch: "abc", Offset: 1, Data: []byte("hello")}, true},
		{"18446744073709551615 E ", Entry{Epoch: "E", Offset: 1<<64 - 1, Data: []byte{}}, true},
		{"7 e  two spaces", Entry{Epoch: "e", Offset: 7, Data: []byte(" two spaces")}, true},
		{"", Entry{}, false},
		{"0 e x", Entry{}, false},
		{"01 e x", Entry{}, false},
		{"18446744073709551616 e x", Entry{}, false},
		{"1 e", Entry{}, false},
		{"1  x", Entry{}, false},
		{"1 e-x y", Entry{}, false},
		{"-1 e x", Entry{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMessage([]byte(tc.in))
			if (err == nil) != tc.ok {
				t.Fatalf("ParseMessage(%q) err = %v", tc.in, err)
			}
			if !tc.ok {
				if !errors.Is(err, ErrBadMessage) {
					t.Fatalf("err %v is not ErrBadMessage", err)
				}
				return
			}
			if got.Epoch != tc.want.Epoch || got.Offset != tc.want.Offset || !bytes.Equal(got.Data, tc.want.Data) {
				t.Fatalf("ParseMessage(%q) = %+v", tc.in, got)
			}
		})
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{"1 abc hello", "18446744073709551615 E ", "0 e x", "1 e", "", "99999999999999999999999 e x", "5 " + NewEpoch() + " \x00\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseMessage(b)
		if err != nil {
			return
		}
		if again := FormatMessage(nil, e); !bytes.Equal(again, b) {
			t.Fatalf("round trip of %q gave %q", b, again)
		}
	})
}

func TestNewEpoch(t *testing.T) {
	a, b := NewEpoch(), NewEpoch()
	if a == b || len(a) != EpochLen {
		t.Fatalf("epochs %q %q", a, b)
	}
	for i := 0; i < len(a); i++ {
		if !validEpochByte(a[i]) {
			t.Fatalf("epoch %q", a)
		}
	}
}
