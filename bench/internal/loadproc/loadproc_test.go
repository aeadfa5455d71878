package loadproc

import (
	"math"
	"testing"
)

func TestMaxDeviation(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		want   float64
	}{
		{nil, 0},
		{[]int{0, 0, 0}, 0},
		{[]int{60, 60, 60}, 0},
		{[]int{54, 60, 66}, 0.10},
		{[]int{0, 300, 300}, 1},
		{[]int{100, 200}, 1.0 / 3},
	} {
		if got := MaxDeviation(tc.counts); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("MaxDeviation(%v) = %v, want %v", tc.counts, got, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{math.NaN(), 5}, 5},
	} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}
