package tunnel

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// errClosingWrite is what a write to a TLSSocket the tunnel is closing
// returns when the socket cannot take its bytes at once.
var errClosingWrite = errors.New("connection closing: the socket takes no more bytes")

// TLSSocket is the socket under a TLS connection of a tunnel: a client's,
// which the gateway's TLS listener hands to crypto/tls
// (tls.Server(NewTLSSocket(c), ...)), or a node's with [pools.tls]
// (tls.Client(NewTLSSocket(c), ...)). What follows says "client" for the
// peer the tunnel writes to; it holds the same for a node.
//
// crypto/tls makes a write error final: after one timed-out write every
// later Write fails the same way, and a record may have gone out in part.
// A tunnel's write to a client that reads nothing waits in short probes
// (stallProbe), looking at its clocks between them; done on a TLS
// connection, the first probe would end the connection. So on a TLSSocket
// the probing happens here, below crypto/tls: Write waits in probes and
// returns an error only at the real limit (the tunnel's write timeout or
// close deadline, the deadline set with SetWriteDeadline, or a failure of
// the socket).
//
// Once the tunnel closes the connection, a write (crypto/tls's
// close_notify alert) is one attempt that never waits: a client whose
// socket is full gets none, and the close does not block. A write waiting
// when the close begins gives up at once.
type TLSSocket struct {
	net.Conn

	// The clocks are the package's (mono), as the runtime's deadlines
	// are: a wall clock stepped back does not put a deadline that fired
	// ahead again.
	deadline atomic.Int64 // the write deadline set with SetWriteDeadline, mono ns; 0: none
	armed    atomic.Int64 // the write deadline set on Conn, mono ns; 0: none
	// owner is the tunnel half writing to the client: its clocks bound
	// every write from when the tunnel starts.
	owner   atomic.Pointer[half]
	closing atomic.Bool // the tunnel is closing the connection: writes never wait
	failed  atomic.Bool // a write gave up with bytes of a record maybe sent

	// For the tests: writes tried on Conn, and how many of them ended at
	// a probe with bytes still to write.
	writes, probes atomic.Uint64
}

// NewTLSSocket wraps the socket c for crypto/tls.
func NewTLSSocket(c net.Conn) *TLSSocket { return &TLSSocket{Conn: c} }

// NetConn returns the connection TLSSocket wraps, as tls.Conn's NetConn
// does: the keepalive reads the socket's TCP_INFO through it.
func (s *TLSSocket) NetConn() net.Conn { return s.Conn }

// SetDeadline sets the read and write deadlines.
func (s *TLSSocket) SetDeadline(t time.Time) error {
	if err := s.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return s.SetWriteDeadline(t)
}

// SetWriteDeadline sets the deadline of writes: one that has not taken
// all its bytes by then fails, and so does every write after it. A write
// waiting meanwhile looks at it at once.
func (s *TLSSocket) SetWriteDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = mono(t)
	}
	s.deadline.Store(ns)
	s.armed.Store(ns)
	return s.Conn.SetWriteDeadline(t)
}

// Write writes all of b. While the socket takes nothing it wakes every
// stallProbe (earlier at a deadline) and tries again; it fails only at the
// deadline set with SetWriteDeadline or, on a tunnel's connection, when the
// tunnel's write timeout or close deadline passes, when the socket
// fails, or when the tunnel closes the connection (errClosingWrite).
func (s *TLSSocket) Write(b []byte) (int, error) {
	if s.closing.Load() {
		return s.writeNow(b)
	}
	h := s.owner.Load()
	start := time.Now()
	last, now := start, start // last: when the socket last took a byte
	n := 0
	var timeout error
	for {
		var wake time.Time
		if h != nil {
			until, err := h.writeLimit(start, last, h.streamState().grace.Load())
			if !now.Before(until) {
				return s.gaveUp(n, err)
			}
			wake = earliest(until, now.Add(h.probe()))
		}
		if ns := s.deadline.Load(); ns != 0 {
			limit := monoTime(ns)
			if !now.Before(limit) {
				if timeout == nil {
					timeout = os.ErrDeadlineExceeded
				}
				return s.gaveUp(n, timeout)
			}
			if wake.IsZero() || limit.Before(wake) {
				wake = limit
			}
		}
		s.arm(now, wake)
		// After arm: a close that came meanwhile set its past deadline
		// after this one, or is seen here.
		if s.closing.Load() {
			return s.gaveUp(n, errClosingWrite)
		}
		k, err := s.Conn.Write(b[n:])
		s.writes.Add(1)
		n += k
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return s.gaveUp(n, err)
		}
		timeout = err
		s.probes.Add(1)
		// The deadline fired: the next attempt sets one again, even if
		// the clocks say it is not due yet.
		s.armed.Store(0)
		now = time.Now()
		if k > 0 {
			last = now
		}
		if h != nil {
			h.stalled()
		}
	}
}

// gaveUp ends a write that wrote n bytes of its record with err: after a
// part of a record the connection carries nothing more (see writeNow).
func (s *TLSSocket) gaveUp(n int, err error) (int, error) {
	if n > 0 {
		s.failed.Store(true)
	}
	return n, err
}

// arm sets the deadline of the next write on Conn to wake (zero: none). A
// deadline already set no later than wake and at least half a probe away
// serves as well: waking early only costs a look at the clocks.
func (s *TLSSocket) arm(now, wake time.Time) {
	var ns int64
	if !wake.IsZero() {
		ns = mono(wake)
	}
	armed := s.armed.Load()
	if armed == ns {
		return
	}
	if ns != 0 && armed != 0 && armed < ns && armed-mono(now) >= int64(stallProbe/2) {
		return
	}
	s.armed.Store(ns)
	_ = s.Conn.SetWriteDeadline(wake)
}

// writeNow writes what the socket takes of b at once, without waiting:
// the writes of a connection being closed. After a write that gave up
// part way through a record it writes nothing: the peer could not read
// what follows; nor does it on a connection without a descriptor.
func (s *TLSSocket) writeNow(b []byte) (int, error) {
	sc, ok := s.Conn.(syscall.Conn)
	if s.failed.Load() || !ok {
		return 0, errClosingWrite
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, errClosingWrite
	}
	n := 0
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				break
			}
		}
		return true // never wait for the socket
	})
	s.writes.Add(1)
	if n < 0 {
		n = 0
	}
	switch {
	case err != nil:
		return n, err
	case werr != nil:
		return n, errClosingWrite
	case n < len(b):
		s.failed.Store(true)
		return n, errClosingWrite
	}
	return n, nil
}

// own makes h's clocks bound every write from now on, and clears a write
// deadline left from the HTTP handshake.
func (s *TLSSocket) own(h *half) {
	s.owner.Store(h)
	_ = s.SetWriteDeadline(time.Time{})
}

// tlsSocketOf returns the TLSSocket under c, a TLS connection (over a
// tlsrecord.Capture, or a RecordConn), or nil.
func tlsSocketOf(c net.Conn) *TLSSocket {
	for range 3 {
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = nc.NetConn()
		if s, ok := c.(*TLSSocket); ok {
			return s
		}
	}
	return nil
}

// closeConn closes c. On a TLSSocket its close_notify alert goes out only
// if the socket takes it at once.
//
// A write may be waiting on the socket meanwhile: one crypto/tls's read
// side makes (an alert, a KeyUpdate answer) holds the TLS connection's
// write lock, which close_notify waits for, while no Write of the
// tunnel's is in flight for Close to cut. So the close first wakes it
// with a deadline in the past; seeing closing, it gives up.
func closeConn(c net.Conn) {
	if s := tlsSocketOf(c); s != nil {
		s.closing.Store(true)
		s.armed.Store(0) // the next arm sets its deadline, whatever it was
		_ = s.Conn.SetWriteDeadline(time.Unix(1, 0))
	}
	_ = c.Close()
}
