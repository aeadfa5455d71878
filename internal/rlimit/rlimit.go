// Package rlimit raises the process's open-file limit, which caps how many
// connections a gateway or relay process can hold (each tunnel takes two).
package rlimit

import (
	"fmt"
	"syscall"
)

// RaiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns the
// limits in force afterwards.
func RaiseNoFile() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return lim.Cur, lim.Max, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
		lim = want
	}
	return lim.Cur, lim.Max, nil
}
