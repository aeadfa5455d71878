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
