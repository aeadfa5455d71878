// Package rawio reads and writes non-blocking descriptors with raw system
// calls: a call that cannot block skips the scheduler's system-call
// bookkeeping (entersyscall, and the runtime monitor's watch for a P held
// in a system call, which wakes it every 20µs while any is), which the
// tunnel pollers and the HTTP/2 connections they read would otherwise pay
// on every read and write.
package rawio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Write is write(2) on a non-blocking descriptor; EINTR is retried.
func Write(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// Read is read(2) on a non-blocking descriptor; EINTR is retried.
func Read(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}
