package pollread

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pipeConn is a net.Conn without a descriptor, for the fallback path.
type pipeConn struct{ net.Conn }

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"poller", func(c net.Conn) net.Conn { return c }},
		{"fallback", func(c net.Conn) net.Conn { return pipeConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			pool := NewPool(8)
			r := NewReader(tc.wrap(b), pool)
			if _, err := a.Write([]byte("hello world")); err != nil {
				t.Fatal(err)
			}
			var got []byte
			for len(got) < 11 {
				bp, n, err := r.Read()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, (*bp)[:n]...)
				pool.Put(bp)
			}
			if string(got) != "hello world" {
				t.Fatalf("got %q", got)
			}
			// The deadline applies.
			_ = b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			bp, _, err := r.Read()
			pool.Put(bp)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after the deadline: %v", err)
			}
			_ = b.SetReadDeadline(time.Time{})
			a.Close()
			bp, n, err := r.Read()
			pool.Put(bp)
			if n != 0 || err != io.EOF {
				t.Fatalf("at the end: %d %v, want io.EOF", n, err)
			}
		})
	}
}

// waitConn is a connection without a descriptor that says when it is
// readable, counting its waits.
type waitConn struct {
	net.Conn
	waits int
	ready chan struct{}
}

func (c *waitConn) WaitRead() error {
	c.waits++
	<-c.ready
	return nil
}

// TestReadWaiterHoldsNoBuffer: a Waiter is waited on before a buffer is
// taken, so a reader blocked on an idle one holds none.
func TestReadWaiterHoldsNoBuffer(t *testing.T) {
	a, b := pair(t)
	var made atomic.Int32
	pool := &Pool{p: sync.Pool{New: func() any { made.Add(1); b := make([]byte, 8); return &b }}}
	wc := &waitConn{Conn: pipeConn{b}, ready: make(chan struct{})}
	r := NewReader(wc, pool)
	got := make(chan string, 1)
	go func() {
		bp, n, err := r.Read()
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string((*bp)[:n])
		pool.Put(bp)
	}()
	time.Sleep(20 * time.Millisecond) // the reader waits in WaitRead
	if n := made.Load(); n != 0 {
		t.Fatalf("%d buffers taken while waiting", n)
	}
	if _, err := a.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	close(wc.ready)
	if s := <-got; s != "hi" || wc.waits != 1 {
		t.Fatalf("read %q after %d waits", s, wc.waits)
	}
}
