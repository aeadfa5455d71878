package health

import (
	"errors"
	"os"
	"syscall"
)

// Reasons a dial fails on the dialing host's side rather than the node's,
// as [LocalReason] names them.
const (
	// ReasonNoSourcePort: connect found no free ephemeral port from the
	// source address toward the node's ip:port (EADDRNOTAVAIL at
	// connect), or bind found none at the source address at all
	// (EADDRINUSE at bind, for a socket bound without
	// IP_BIND_ADDRESS_NO_PORT). More source addresses, or a wider
	// net.ipv4.ip_local_port_range, give more.
	ReasonNoSourcePort = "no_source_port"
	// ReasonNoSourceAddr: the source address to bind is not on this host
	// (EADDRNOTAVAIL at bind), say one removed from its interface.
	ReasonNoSourceAddr = "no_source_addr"
	// ReasonNoDescriptors: the process or the system is out of file
	// descriptors (EMFILE, ENFILE).
	ReasonNoDescriptors = "no_descriptors"
	// ReasonNoMemory: the kernel is out of memory for sockets (ENOBUFS,
	// ENOMEM).
	ReasonNoMemory = "no_memory"
)

// LocalReason names the cause of a dial error that lies with the dialing
// host, one of the Reason constants, or returns "" for an error that may
// be the node's (refused, reset, timed out, unreachable). Such an error
// says nothing about the node's health: [Checker.ReportFailure] ignores
// it, and a probe that meets it leaves the node's state as it was.
func LocalReason(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ""
	}
	var se *os.SyscallError
	atBind := errors.As(err, &se) && se.Syscall == "bind"
	switch errno {
	case syscall.EADDRNOTAVAIL:
		if atBind {
			return ReasonNoSourceAddr
		}
		return ReasonNoSourcePort
	case syscall.EADDRINUSE:
		if atBind {
			return ReasonNoSourcePort
		}
	case syscall.EMFILE, syscall.ENFILE:
		return ReasonNoDescriptors
	case syscall.ENOBUFS, syscall.ENOMEM:
		return ReasonNoMemory
	}
	return ""
}
