package loadgen

import (
	"errors"
	"testing"
	"time"
)

func TestMsgRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    Msg
		size int
		want int
	}{
		{"minimal", Msg{Run: 1, Sender: 2, Seq: 3, SentNS: 4}, 0, MsgHeaderLen},
		{"padded", Msg{Run: 0xFFFFFFFF, Sender: 1 << 20, Flags: FlagResent, Seq: 1<<64 - 1, SentNS: -5}, 1000, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendMsg(nil, tt.m, tt.size)
			if len(b) != tt.want {
				t.Fatalf("len %d, want %d", len(b), tt.want)
			}
			got, err := ParseMsg(b)
			if err != nil || got != tt.m {
				t.Fatalf("ParseMsg = %+v, %v; want %+v", got, err, tt.m)
			}
		})
	}
	if _, err := ParseMsg([]byte(`{"type":"hello"}`)); !errors.Is(err, ErrNotLoadMsg) {
		t.Errorf("hello frame: %v", err)
	}
	now := time.Now()
	if age := (Msg{SentNS: now.Add(-time.Second).UnixNano()}).Age(now); age != time.Second {
		t.Errorf("Age = %v", age)
	}
}

func FuzzParseMsg(f *testing.F) {
	f.Add(AppendMsg(nil, Msg{Run: 1, Sender: 2, Seq: 3, SentNS: 4}, 40))
	f.Add([]byte("WL"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMsg(b)
		if err != nil {
			return
		}
		again, err := ParseMsg(AppendMsg(nil, m, len(b)))
		if err != nil || again != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, again, err)
		}
	})
}
