package rlimit

import (
	"syscall"
	"testing"
)

func TestRaiseNoFileReachesHardLimit(t *testing.T) {
	soft, hard, err := RaiseNoFile()
	if err != nil {
		t.Fatal(err)
	}
	if soft != hard {
		t.Fatalf("soft %d, hard %d: want soft raised to hard", soft, hard)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != soft {
		t.Fatalf("limit in force %d, reported %d", lim.Cur, soft)
	}
}

// TestMaxConnsLeavesReserve checks the connection cap an open-file limit
// gives: two descriptors per connection after the reserve, never below 1.
func TestMaxConnsLeavesReserve(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want int
	}{
		{0, 1},
		{100, 1},
		{600, 233},           // reserve 134
		{1024, 443},          // reserve 138
		{20_000, 9_836},      // reserve 328
		{1_048_576, 518_981}, // reserve 10_613
	} {
		if got := MaxConns(tc.n); got != tc.want {
			t.Errorf("MaxConns(%d) = %d, want %d", tc.n, got, tc.want)
		}
		if got := MaxConns(tc.n); tc.n > 200 && uint64(2*got)+Reserve(tc.n) > tc.n {
			t.Errorf("MaxConns(%d) = %d: two descriptors each and the reserve exceed the limit", tc.n, got)
		}
	}
	if got := MaxConns(^uint64(0)); got <= 0 {
		t.Fatalf("MaxConns(unlimited) = %d", got)
	}
}
