package loadgen

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

func TestHistPercentiles(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7 * time.Millisecond}, 0.99, 7 * time.Millisecond},
		{"small exact", []time.Duration{10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond}, 0.5, 20 * time.Microsecond},
		{"p100 is max", []time.Duration{time.Millisecond, 2 * time.Second}, 1, 2 * time.Second},
		{"negative is zero", []time.Duration{-time.Second}, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hist
			for _, v := range tt.values {
				h.Record(v)
			}
			if got := h.Percentile(tt.q); got != tt.want {
				t.Errorf("Percentile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

func TestHistRelativeError(t *testing.T) {
	var h Hist
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * 10 * time.Microsecond) // 10µs .. 100ms
	}
	for _, q := range []float64{0.5, 0.95, 0.99} {
		want := q * 100 // ms
		got := float64(h.Percentile(q).Microseconds()) / 1000
		if math.Abs(got-want)/want > 0.04 {
			t.Errorf("p%v = %.3fms, want %.3fms within 4%%", q*100, got, want)
		}
	}
	if h.Max() != 100*time.Millisecond || h.Count() != 10000 {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
}

func TestHistIndexUpperConsistent(t *testing.T) {
	for _, us := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 123456, 1 << 40, 1<<62 + 12345} {
		i := histIndex(us)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d out of range", us, i)
		}
		if up := histUpper(i); up < us || (i > 0 && histUpper(i-1) >= us) {
			t.Errorf("value %d in bucket %d with bounds (%d, %d]", us, i, histUpper(i-1), up)
		}
	}
}

func TestHistJSONMergeRoundTrip(t *testing.T) {
	var a, b Hist
	for i := range 100 {
		a.Record(time.Duration(i) * time.Millisecond)
		b.Record(time.Duration(i+100) * time.Millisecond)
	}
	blob, err := json.Marshal(&b)
	if err != nil {
		t.Fatal(err)
	}
	var c Hist
	if err := json.Unmarshal(blob, &c); err != nil {
		t.Fatal(err)
	}
	a.Merge(&c)
	if a.Count() != 200 || a.Max() != 199*time.Millisecond {
		t.Fatalf("merged count %d max %v", a.Count(), a.Max())
	}
	if p := a.Percentile(0.5); p < 97*time.Millisecond || p > 103*time.Millisecond {
		t.Errorf("merged p50 = %v, want ~100ms", p)
	}
	if err := json.Unmarshal([]byte(`{"buckets":[[99999,1]]}`), &c); err == nil {
		t.Error("out-of-range bucket accepted")
	}
}
