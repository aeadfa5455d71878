package tunnel

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/wake"
	"golang.org/x/sys/unix"
)

// NodeSocket is a connection to a node that a poller watches from its
// connect on: a bare non-blocking socket (upstream's Dialer.DialSocket)
// registered with the poller that is to run its tunnel. The handshake's
// waits are that poller's events, and the tunnel takes the socket over
// with its registration: no duplicate descriptor, no close of a Go
// connection, no second registration, and none of Go's dialer's
// allocations.
//
// Until a tunnel takes it, it is a net.Conn whose Read and Write wait for
// the poller's events within the deadlines set (a tunnel on the goroutine
// engine uses it so). One Read and one Write may run at a time, with Close
// and the deadline setters from any goroutine.
type NodeSocket struct {
	p      *poller
	remote netip.AddrPort
	// mu is held for reading across each system call on fd, and for
	// writing by release (Close, or a tunnel taking fd), so that fd is
	// never closed (and its number reused) under a read or write.
	mu sync.RWMutex
	fd int // -1 once closed or taken
	id int32
	// rwake and wwake carry the poller's word that fd may be readable or
	// writable (or a deadline moved); done is closed by release.
	rwake, wwake chan struct{}
	done         chan struct{}
	rdl, wdl     atomic.Int64 // deadlines, Unix ns; 0: none
}

// socketEventPad marks the epoll event data of a NodeSocket: Fd is
// socketEventFd of its index; a polled connection's have Pad 0.
const socketEventPad = 1

// socketEventFd is the epoll event data of sockets[i], below -1 as a
// polled connection's.
func socketEventFd(i int32) int32 { return -2 - i }

// WatchSocket registers fd, a non-blocking TCP socket connecting to
// remote, with a poller and returns it as a NodeSocket that owns fd. On
// error (the engine cannot run, or epoll_ctl failed) fd is left to the
// caller.
func WatchSocket(fd int, remote netip.AddrPort) (*NodeSocket, error) {
	p := pickPoller()
	if p == nil {
		return nil, errNoEngine
	}
	s := &NodeSocket{
		p: p, remote: remote, fd: fd,
		rwake: wake.New(), wwake: wake.New(), done: make(chan struct{}),
	}
	s.id = p.addSocket(s)
	ev := unix.EpollEvent{Events: watchEvents, Fd: socketEventFd(s.id), Pad: socketEventPad}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		p.dropSocket(s.id)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	liveSockets.Add(1)
	return s, nil
}

// liveSockets counts the NodeSockets registered and neither closed nor
// taken by a tunnel.
var liveSockets atomic.Int64

// NodeSockets returns how many NodeSockets are open and not taken by a
// tunnel: handshakes under way to nodes without TLS, and tunnels on
// goroutines over one. It returns to zero once those end.
func NodeSockets() int { return int(liveSockets.Load()) }

// errNoEngine is WatchSocket's error when no poller could be started.
var errNoEngine = &net.OpError{Op: "watch", Net: "tcp", Err: os.ErrInvalid}

// Read reads from the socket, waiting for it to become readable within
// the read deadline.
func (s *NodeSocket) Read(b []byte) (int, error) {
	for {
		if err := s.expired(&s.rdl); err != nil {
			return 0, s.fail("read", err)
		}
		s.mu.RLock()
		if s.fd < 0 {
			s.mu.RUnlock()
			return 0, s.fail("read", net.ErrClosed)
		}
		n, err := rawRead(s.fd, b)
		s.mu.RUnlock()
		switch {
		case err == unix.EAGAIN:
			if err := s.wait(s.rwake, &s.rdl); err != nil {
				return 0, s.fail("read", err)
			}
			continue
		case err != nil:
			return 0, s.opError("read", err)
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of b, waiting for room within the write deadline.
func (s *NodeSocket) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		if err := s.expired(&s.wdl); err != nil {
			return done, s.fail("write", err)
		}
		s.mu.RLock()
		if s.fd < 0 {
			s.mu.RUnlock()
			return done, s.fail("write", net.ErrClosed)
		}
		n, err := rawWrite(s.fd, b[done:])
		s.mu.RUnlock()
		switch {
		case err == unix.EAGAIN:
			if err := s.wait(s.wwake, &s.wdl); err != nil {
				return done, s.fail("write", err)
			}
		case err != nil:
			return done, s.opError("write", err)
		default:
			done += n
		}
	}
	return done, nil
}

// opError is a failed system call on the socket as net's connections
// report it.
func (s *NodeSocket) opError(op string, err error) error {
	return s.fail(op, os.NewSyscallError(op, err))
}

// fail is err (a deadline passed, the socket closed) in op as net's
// connections report it, naming the node.
func (s *NodeSocket) fail(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Addr: s.RemoteAddr(), Err: err}
}

// expired returns os.ErrDeadlineExceeded once the deadline dl has passed.
func (s *NodeSocket) expired(dl *atomic.Int64) error {
	if d := dl.Load(); d != 0 && time.Now().UnixNano() >= d {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// wait waits for the poller's word on woken (a wake channel), the
// deadline dl, or Close.
func (s *NodeSocket) wait(woken chan struct{}, dl *atomic.Int64) error {
	d := dl.Load()
	if d == 0 {
		select {
		case <-woken:
			return nil
		case <-s.done:
			return net.ErrClosed
		}
	}
	left := time.Until(time.Unix(0, d))
	if left <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-woken:
		return nil
	case <-s.done:
		return net.ErrClosed
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}

// notify passes the poller's events on to the waiters they concern.
func (s *NodeSocket) notify(events uint32) {
	const broken = unix.EPOLLHUP | unix.EPOLLERR
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLPRI|broken) != 0 {
		wake.Signal(s.rwake)
	}
	if events&(unix.EPOLLOUT|broken) != 0 {
		wake.Signal(s.wwake)
	}
}

// Close closes the socket; a Read or Write waiting returns net.ErrClosed.
func (s *NodeSocket) Close() error {
	fd := s.release()
	if fd < 0 {
		return net.ErrClosed
	}
	// Out of the set first: a child process forked meanwhile may hold
	// a copy of the descriptor (see forget).
	_ = unix.EpollCtl(s.p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	return unix.Close(fd)
}

// release ends the NodeSocket's hold on its descriptor and returns it (-1
// when closed already): waiters return, the poller forgets it. The
// descriptor stays registered with the event data of the NodeSocket, which
// no longer names it.
func (s *NodeSocket) release() int {
	s.mu.Lock()
	fd := s.fd
	s.fd = -1
	s.mu.Unlock()
	if fd < 0 {
		return -1
	}
	close(s.done)
	s.p.dropSocket(s.id)
	liveSockets.Add(-1)
	return fd
}

// CloseWrite shuts down the writing side of the socket, as
// net.TCPConn's does.
func (s *NodeSocket) CloseWrite() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fd < 0 {
		return net.ErrClosed
	}
	if err := unix.Shutdown(s.fd, unix.SHUT_WR); err != nil {
		return s.opError("shutdown", err)
	}
	return nil
}

// SyscallConn returns the socket as a syscall.RawConn, as net.TCPConn's
// does (the tunnel reads its send queue through it).
func (s *NodeSocket) SyscallConn() (syscall.RawConn, error) { return socketRaw{s}, nil }

// socketRaw is a NodeSocket's syscall.RawConn.
type socketRaw struct{ s *NodeSocket }

// Control calls f with the descriptor, which stays open meanwhile.
func (r socketRaw) Control(f func(fd uintptr)) error {
	r.s.mu.RLock()
	defer r.s.mu.RUnlock()
	if r.s.fd < 0 {
		return net.ErrClosed
	}
	f(uintptr(r.s.fd))
	return nil
}

// Read calls f with the descriptor until it returns true, waiting for
// the socket to be readable between calls.
func (r socketRaw) Read(f func(fd uintptr) bool) error { return r.until(f, r.s.rwake, &r.s.rdl) }

// Write calls f with the descriptor until it returns true, waiting for
// room between calls.
func (r socketRaw) Write(f func(fd uintptr) bool) error { return r.until(f, r.s.wwake, &r.s.wdl) }

// until calls f until it returns true, waiting on woken within dl between.
func (r socketRaw) until(f func(fd uintptr) bool, woken chan struct{}, dl *atomic.Int64) error {
	for {
		var done bool
		if err := r.Control(func(fd uintptr) { done = f(fd) }); err != nil || done {
			return err
		}
		if err := r.s.wait(woken, dl); err != nil {
			return err
		}
	}
}

// LocalAddr returns the socket's local address (nil once closed).
func (s *NodeSocket) LocalAddr() net.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fd < 0 {
		return nil
	}
	sa, err := unix.Getsockname(s.fd)
	if err != nil {
		return nil
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: a.Addr[:], Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: a.Addr[:], Port: a.Port}
	}
	return nil
}

// RemoteAddr returns the node's address.
func (s *NodeSocket) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(s.remote) }

// SetDeadline sets the read and write deadlines.
func (s *NodeSocket) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline; a waiting Read sees it at once.
func (s *NodeSocket) SetReadDeadline(t time.Time) error {
	s.rdl.Store(deadlineNs(t))
	wake.Signal(s.rwake)
	return nil
}

// SetWriteDeadline sets the write deadline; a waiting Write sees it at
// once.
func (s *NodeSocket) SetWriteDeadline(t time.Time) error {
	s.wdl.Store(deadlineNs(t))
	wake.Signal(s.wwake)
	return nil
}

// deadlineNs is t in Unix ns, 0 for the zero time (no deadline).
func deadlineNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// addSocket gives s an index in the poller's sockets.
func (p *poller) addSocket(s *NodeSocket) int32 {
	p.smu.Lock()
	defer p.smu.Unlock()
	if n := len(p.freeSockets); n > 0 {
		i := p.freeSockets[n-1]
		p.freeSockets = p.freeSockets[:n-1]
		p.sockets[i] = s
		return i
	}
	p.sockets = append(p.sockets, s)
	return int32(len(p.sockets) - 1)
}

// socketsKept is the length of a poller's sockets table that it keeps
// when the last NodeSocket in it goes; a longer table, left by a burst of
// handshakes, is dropped then.
const socketsKept = 256

// dropSocket frees index i. An event still naming it later is dropped,
// or wakes the NodeSocket given the index next, which then finds nothing
// to read or write and waits again. When it was the last NodeSocket of a
// table longer than socketsKept, the table goes, so that a burst of
// handshakes does not hold its length.
func (p *poller) dropSocket(i int32) {
	p.smu.Lock()
	p.sockets[i] = nil
	p.freeSockets = append(p.freeSockets, i)
	if len(p.freeSockets) == len(p.sockets) && len(p.sockets) > socketsKept {
		p.sockets, p.freeSockets = nil, nil
	}
	p.smu.Unlock()
}

// socketEvent passes an epoll event on to its NodeSocket.
func (p *poller) socketEvent(ev *unix.EpollEvent) {
	i := -2 - ev.Fd
	p.smu.Lock()
	var s *NodeSocket
	if int(i) < len(p.sockets) {
		s = p.sockets[i]
	}
	p.smu.Unlock()
	if s != nil {
		s.notify(ev.Events)
	}
}
