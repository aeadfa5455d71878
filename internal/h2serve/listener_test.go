package h2serve_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/h2serve"
)

// TestListener pins the split of one port: an HTTP/1.1 connection is
// returned by Accept with its first bytes intact, even while an HTTP/2
// client that stalls in its preface is still being sniffed, an HTTP/2 one
// is served, and Close ends Accept with net.ErrClosed.
func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h2serve.Server{Handler: echo}
	l := h2serve.NewListener(ln, srv, ioTimeout)
	defer srv.Close()
	addr := ln.Addr().String()

	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	_, _ = io.WriteString(stalled, "PRI * HTTP/2") // and nothing more

	h1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	_, _ = io.WriteString(h1, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(ioTimeout):
		t.Fatal("the HTTP/1.1 connection was not accepted")
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(ioTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "GET /healthz HTTP/1.1\r\n" {
		t.Fatalf("accepted connection reads %q, %v", line, err)
	}

	hc, err := h2client.Dial(addr, ioTimeout)
	if err != nil {
		t.Fatalf("HTTP/2 beside HTTP/1.1: %v", err)
	}
	defer hc.Close()
	st, _ := hc.Open("/x", nil)
	if status, _, _, err := st.Response(ioTimeout); err != nil || status != 200 {
		t.Fatalf("HTTP/2 stream: %d %v", status, err)
	}

	_ = l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
