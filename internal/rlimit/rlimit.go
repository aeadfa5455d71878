// Package rlimit raises the process's open-file limit, which caps how many
// connections a gateway or relay process can hold (each tunnel takes two).
package rlimit

import (
	"fmt"
	"log/slog"
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

// NoFile returns the RLIMIT_NOFILE limits in force.
func NoFile() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return lim.Cur, lim.Max, nil
}

// Reserve is how many descriptors of an open-file limit of n are kept
// apart from client connections: 128, for the process's own files, the
// listeners, admin connections, health probes and auth plugin processes,
// plus 1% of n for the probes and admin traffic of a large deployment.
func Reserve(n uint64) uint64 { return 128 + n/100 }

// MaxConns is how many client connections an open-file limit of n can
// carry: each may hold two descriptors (the client's socket and the node's)
// once it is a tunnel, so (n - Reserve(n)) / 2, and never less than 1.
func MaxConns(n uint64) int {
	const ceiling = 1 << 40 // an unlimited or absurd limit caps nothing
	if n > ceiling {
		n = ceiling
	}
	r := Reserve(n)
	if n <= r+2 {
		return 1
	}
	return int((n - r) / 2)
}

// RaiseAndLog raises the open-file limit (RaiseNoFile) and logs the limits
// in force with what they carry for a gateway: the descriptors kept in
// reserve and the max_conns ceiling. A limit that could not be raised is a
// warning, not an error: the process runs on what it has.
func RaiseAndLog(log *slog.Logger) {
	soft, hard, err := RaiseNoFile()
	if err != nil {
		log.Warn("open-file limit not raised", "err", err)
	}
	log.Info("open-file limit", "soft", soft, "hard", hard, "reserve", Reserve(soft), "max_conns_ceiling", MaxConns(soft))
}
