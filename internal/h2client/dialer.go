package h2client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fasthttp/websocket"
)

// Dialer returns a websocket.Dialer whose connections are new streams of
// c: the HTTP/1.1 upgrade request the Dialer writes becomes an extended
// CONNECT, and the stream's response the HTTP/1.1 response it reads (200
// as 101 with the accept value its key asks for; a refusal with its status,
// fields and body), so that Dial returns a *websocket.Conn over the stream,
// or websocket.ErrBadHandshake with the refusal as *http.Response.
func (c *Conn) Dialer(timeout time.Duration) *websocket.Dialer {
	return &websocket.Dialer{
		HandshakeTimeout: timeout,
		NetDialContext: func(context.Context, string, string) (net.Conn, error) {
			return &upgradeConn{c: c, timeout: timeout}, nil
		},
	}
}

// upgradeConn is a Dialer's connection: a stream opened by the first
// Write.
type upgradeConn struct {
	*Stream // nil until the request is written
	c       *Conn
	timeout time.Duration
	key     string
	head    []byte // the translated response, read before the stream
	headed  bool
}

func (u *upgradeConn) Write(p []byte) (int, error) {
	if u.Stream != nil {
		return u.Stream.Write(p)
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(p)))
	if err != nil {
		return 0, fmt.Errorf("h2client: read the upgrade request: %w", err)
	}
	u.key = req.Header.Get("Sec-Websocket-Key")
	s, err := u.c.Open(req.RequestURI, req.Header)
	if err != nil {
		return 0, err
	}
	u.Stream = s
	return len(p), nil
}

func (u *upgradeConn) Read(p []byte) (int, error) {
	if u.Stream == nil {
		return 0, ErrNoStream
	}
	if !u.headed {
		u.headed = true
		status, h, body, err := u.Stream.Response(u.timeout)
		if err != nil {
			return 0, err
		}
		var b bytes.Buffer
		if status == http.StatusOK {
			sum := sha1.Sum([]byte(u.key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
			fmt.Fprintf(&b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n",
				base64.StdEncoding.EncodeToString(sum[:]))
		} else {
			fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
		}
		_ = h.Write(&b)
		b.WriteString("\r\n")
		b.Write(body)
		u.head = b.Bytes()
	}
	if len(u.head) > 0 {
		n := copy(p, u.head)
		u.head = u.head[n:]
		return n, nil
	}
	return u.Stream.Read(p)
}

func (u *upgradeConn) Close() error {
	if u.Stream == nil {
		return nil
	}
	return u.Stream.Close()
}

func (u *upgradeConn) LocalAddr() net.Addr  { return u.c.nc.LocalAddr() }
func (u *upgradeConn) RemoteAddr() net.Addr { return u.c.nc.RemoteAddr() }
func (u *upgradeConn) SetDeadline(t time.Time) error {
	if u.Stream == nil {
		return nil
	}
	return u.Stream.SetDeadline(t)
}
func (u *upgradeConn) SetReadDeadline(t time.Time) error {
	if u.Stream == nil {
		return nil
	}
	return u.Stream.SetReadDeadline(t)
}
func (u *upgradeConn) SetWriteDeadline(time.Time) error { return nil }

// StreamOf returns the stream under a *websocket.Conn from a Dialer of
// this package (nil for another).
func StreamOf(ws *websocket.Conn) *Stream {
	if u, ok := ws.NetConn().(*upgradeConn); ok {
		return u.Stream
	}
	return nil
}
