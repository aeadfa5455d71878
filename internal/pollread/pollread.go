// Package pollread reads a socket through the runtime's poller without
// holding a buffer while it waits: a buffer comes from a pool only once the
// socket is readable. Tens of thousands of idle connections then cost no
// read buffers at all. The gateway's tunnels and wsload's clients read this
// way.
package pollread

import (
	"io"
	"net"
	"sync"
	"syscall"
)

// Pool hands out read buffers of one size. It is safe for concurrent use.
type Pool struct{ p sync.Pool }

// NewPool returns a pool of size-byte buffers.
func NewPool(size int) *Pool {
	return &Pool{p: sync.Pool{New: func() any { b := make([]byte, size); return &b }}}
}

// Get returns a buffer; give it back with Put.
func (p *Pool) Get() *[]byte { return p.p.Get().(*[]byte) }

// Put returns a buffer to the pool; nil is ignored.
func (p *Pool) Put(b *[]byte) {
	if b != nil {
		p.p.Put(b)
	}
}

// Reader reads one connection. Like the connection's own Read, it must be
// used by one goroutine at a time.
type Reader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: the connection has no descriptor to poll
	pool *Pool
}

// Waiter is a connection without a descriptor that can say when a Read
// would not block (an HTTP/2 stream): Reader waits with it before it
// takes a buffer.
type Waiter interface {
	// WaitRead returns once a Read would not block, or with the error a
	// Read would return (its deadline passed).
	WaitRead() error
}

// NewReader returns a reader of c drawing buffers from pool. A connection
// without a file descriptor is read with its Read into a pool buffer,
// which it then holds while it waits (a TLS connection, say), unless it
// is a Waiter.
func NewReader(c net.Conn, pool *Pool) *Reader {
	r := &Reader{conn: c, pool: pool}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			r.raw = raw
		}
	}
	return r
}

// Read waits until the connection is readable, then reads into a buffer
// from the pool and returns it with the number of bytes read. The caller
// owns the buffer until it gives it back with the pool's Put (also when n
// is 0). The connection's deadlines apply; io.EOF is returned at the end of
// the stream.
func (r *Reader) Read() (*[]byte, int, error) {
	if r.raw == nil {
		if w, ok := r.conn.(Waiter); ok {
			if err := w.WaitRead(); err != nil {
				return nil, 0, err
			}
		}
		bp := r.pool.Get()
		n, err := r.conn.Read(*bp)
		if n == 0 && err == nil {
			err = io.ErrNoProgress
		}
		return bp, n, err
	}
	var (
		bp   *[]byte
		n    int
		rerr error
	)
	err := r.raw.Read(func(fd uintptr) bool {
		bp = r.pool.Get()
		for {
			n, rerr = syscall.Read(int(fd), *bp)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			r.pool.Put(bp)
			bp = nil
			return false // wait for the poller, holding no buffer
		}
		return true
	})
	switch {
	case err != nil:
		return bp, 0, err
	case rerr != nil:
		return bp, 0, rerr
	case n == 0:
		return bp, 0, io.EOF
	}
	return bp, n, nil
}
