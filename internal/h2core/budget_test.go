package h2core

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestControlBudget: a burst is free, then frames pass at the refill
// rate only; work earns tokens back within the burst; owed frames are
// free.
func TestControlBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at     time.Duration // since t0
		spend  int           // frames spent at that moment
		earn   int
		owe    int64
		wantOK int // how many of spend pass before the cut (-1: all)
	}
	cases := []struct {
		name        string
		burst, rate int
		steps       []step
	}{
		{"the burst passes, one more is cut", 10, 100, []step{{spend: 11, wantOK: 10}}},
		{"a second refills rate tokens", 10, 100, []step{{spend: 10, wantOK: -1}, {at: time.Second, spend: 11, wantOK: 10}}},
		{"refill is capped at the burst", 10, 1000, []step{{spend: 10, wantOK: -1}, {at: time.Hour, spend: 11, wantOK: 10}}},
		{"a tenth of a second refills a tenth", 1000, 1000, []step{{spend: 1000, wantOK: -1}, {at: 100 * time.Millisecond, spend: 101, wantOK: 100}}},
		{"work earns within the burst", 5, 1, []step{{spend: 5, wantOK: -1}, {earn: 3, spend: 4, wantOK: 3}}},
		{"earning past the burst keeps the burst", 5, 1, []step{{earn: 100, spend: 6, wantOK: 5}}},
		{"owed frames are free", 2, 1, []step{{owe: 4, spend: 7, wantOK: 6}}},
		{"a long refill does not overflow", 3, 1 << 30, []step{{spend: 3, wantOK: -1}, {at: 1000 * time.Hour, spend: 4, wantOK: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewControlBudget(tc.burst, tc.rate, t0)
			for i, st := range tc.steps {
				b.Earn(st.earn)
				b.Owe(st.owe)
				now := t0.Add(st.at)
				passed := 0
				var cut error
				for range st.spend {
					if cut = b.Spend(now); cut != nil {
						break
					}
					passed++
				}
				want := st.wantOK
				if want < 0 {
					want = st.spend
				}
				if passed != want {
					t.Fatalf("step %d: %d frames passed, want %d", i, passed, want)
				}
				if want < st.spend {
					var ce ConnError
					if !errors.As(cut, &ce) || ce.Code != http2.ErrCodeEnhanceYourCalm {
						t.Fatalf("step %d: cut with %v, want ENHANCE_YOUR_CALM", i, cut)
					}
				}
			}
		})
	}
}

// TestReadBudget: one ReadFrame reads at most Limit bytes, and Reset
// starts the next one's budget.
func TestReadBudget(t *testing.T) {
	src := bytes.NewReader(make([]byte, 100))
	b := ReadBudget{R: src, Limit: 30}
	buf := make([]byte, 64)
	n, err := b.Read(buf)
	if n != 30 || err != nil {
		t.Fatalf("first read: %d, %v; want 30 bytes", n, err)
	}
	if _, err := b.Read(buf); !errors.Is(err, ErrHeaderFlood) {
		t.Fatalf("read past the limit: %v, want ErrHeaderFlood", err)
	}
	b.Reset()
	if n, err := io.ReadFull(&b, buf[:30]); n != 30 || err != nil {
		t.Fatalf("after Reset: %d, %v", n, err)
	}
	if got, want := ReadLimit(16<<10, 16384), 4*16<<10+2*(16384+9); got != want {
		t.Fatalf("ReadLimit = %d, want %d", got, want)
	}
}

// TestReadBudgetStopsContinuationFlood: a header block of CONTINUATION
// frames that decode to nothing (hpack table size updates) is cut by
// the budget, not read for as long as the peer sends it.
func TestReadBudgetStopsContinuationFlood(t *testing.T) {
	var wire bytes.Buffer
	fr := http2.NewFramer(&wire, nil)
	frag := bytes.Repeat([]byte{0x20}, 16384) // dynamic table size update to 0
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: frag}); err != nil {
		t.Fatal(err)
	}
	for range 200 { // 3.2 MiB of fragments, no END_HEADERS
		if err := fr.WriteContinuation(1, false, frag); err != nil {
			t.Fatal(err)
		}
	}
	in := ReadBudget{R: &wire, Limit: ReadLimit(16<<10, 16384)}
	rd := http2.NewFramer(io.Discard, &in)
	rd.MaxHeaderListSize = 16 << 10
	rd.ReadMetaHeaders = newDecoder()
	in.Reset()
	_, err := rd.ReadFrame()
	if !errors.Is(err, ErrHeaderFlood) {
		t.Fatalf("ReadFrame = %v, want ErrHeaderFlood", err)
	}
	if left := wire.Len(); left < 2<<20 {
		t.Fatalf("read %d bytes of the flood before the cut", 3<<20-left)
	}
}

func newDecoder() *hpack.Decoder { return hpack.NewDecoder(4096, nil) }
