package h2serve

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Listener splits the connections of a net.Listener by their first bytes:
// those that start with the HTTP/2 client preface are served by a Server,
// the others are returned by Accept, with the bytes read replayed, for an
// HTTP/1.1 server. Each accepted connection is sniffed on a goroutine of
// its own, so a slow client never holds up the next accept. It is safe for
// concurrent use.
type Listener struct {
	ln      net.Listener
	srv     *Server
	timeout time.Duration
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	err     error // why accepting stopped
}

// NewListener starts accepting on ln. Connections that begin with the
// preface within prefaceTimeout go to srv.ServeConn; the rest are returned
// by Accept.
func NewListener(ln net.Listener, srv *Server, prefaceTimeout time.Duration) *Listener {
	l := &Listener{
		ln:      ln,
		srv:     srv,
		timeout: prefaceTimeout,
		conns:   make(chan net.Conn),
		done:    make(chan struct{}),
	}
	go l.acceptLoop()
	return l
}

// acceptLoop accepts until ln fails or is closed. A temporary error
// (too many open files) is retried after a pause, as net/http does.
func (l *Listener) acceptLoop() {
	var pause time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(pause):
					continue
				case <-l.done:
				}
			}
			l.stop(err)
			return
		}
		pause = 0
		go l.sniff(c)
	}
}

// isTemporary reports whether err says so (EMFILE, ENFILE and the like).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// sniff sends c to the HTTP/2 server or to Accept.
func (l *Listener) sniff(c net.Conn) {
	h2, rest, err := Sniff(c, l.timeout)
	switch {
	case err != nil:
		_ = c.Close()
	case h2:
		_ = l.srv.ServeConn(c)
	default:
		select {
		case l.conns <- rest:
		case <-l.done:
			_ = c.Close()
		}
	}
}

func (l *Listener) stop(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.done)
	})
}

// Accept returns the next connection that is not HTTP/2 with prior
// knowledge. Once the listener is closed or has failed it returns an error:
// net.ErrClosed after Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// Close stops accepting: the underlying listener is closed. Connections
// already handed to the Server or returned by Accept are not closed.
func (l *Listener) Close() error {
	l.stop(net.ErrClosed)
	return l.ln.Close()
}

// Addr returns the underlying listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

var _ net.Listener = (*Listener)(nil)
