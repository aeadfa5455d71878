package h2serve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/net/http2"
)

// Preface is the HTTP/2 client connection preface (RFC 9113 section 3.4)
// that starts every connection with prior knowledge.
const Preface = http2.ClientPreface

// matchPreface reports whether b, the first bytes of a connection, may
// still be the client preface (a prefix of it) and whether it is all of
// it.
func matchPreface(b []byte) (maybe, whole bool) {
	if len(b) > len(Preface) {
		b = b[:len(Preface)]
	}
	if string(b) != Preface[:len(b)] {
		return false, false
	}
	return true, len(b) == len(Preface)
}

// Sniff reads the first bytes of c, at most len(Preface) of them and
// waiting at most timeout, to tell HTTP/2 with prior knowledge from
// anything else. It reads no further than needed: a byte that departs from
// the preface ends the wait, so an HTTP/1.1 request never waits for
// bytes it does not send.
//
// With h2 true the preface has been consumed and rest is c. Otherwise rest
// reads the bytes already read, then c: another server sees the connection
// unchanged, even when the timeout passed first (it applies its own
// timeouts). Bytes that depart from the preface are read on to the end of
// their first line (at most maxRequestLine, within the timeout), which an
// HTTP/1.1 client sends at once: a line that is not an HTTP/1.x request
// line is neither protocol, an invalid preface (RFC 9113 section 3.4),
// and gets ErrNotHTTP. err is set, and rest nil, only then or when c
// failed or ended before sending a byte; the caller closes c. Sniff
// leaves c's deadlines cleared.
func Sniff(c net.Conn, timeout time.Duration) (h2 bool, rest net.Conn, err error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return false, nil, err
	}
	var buf [len(Preface)]byte
	n := 0
	for {
		m, rerr := c.Read(buf[n:])
		n += m
		maybe, whole := matchPreface(buf[:n])
		if whole {
			return true, c, c.SetReadDeadline(time.Time{})
		}
		if rerr != nil || !maybe {
			if n == 0 && !errors.Is(rerr, os.ErrDeadlineExceeded) {
				return false, nil, rerr
			}
			var head []byte
			if n > 0 {
				head = append(head, buf[:n]...)
			}
			if n > 0 && rerr == nil {
				var ok bool
				if head, ok = readRequestLine(c, head); !ok {
					return false, nil, ErrNotHTTP
				}
			}
			if err := c.SetReadDeadline(time.Time{}); err != nil {
				return false, nil, err
			}
			if n == 0 {
				return false, c, nil
			}
			return false, &replayConn{Conn: c, head: head}, nil
		}
	}
}

// ErrNotHTTP is what Sniff returns for a connection whose first line is
// neither the HTTP/2 client preface nor an HTTP/1.x request line.
var ErrNotHTTP = errors.New("h2serve: the connection starts with neither the HTTP/2 client preface nor an HTTP/1.x request line")

// maxRequestLine bounds what Sniff reads of a first line that is not the
// preface; a longer one goes to the HTTP/1.1 server as it is.
const maxRequestLine = 8 << 10

// readRequestLine reads c on after head until head holds a whole line,
// and reports whether that line may be an HTTP/1.x request line. A line
// not complete within maxRequestLine, or by the read deadline, or before
// c ends, is left to the HTTP/1.1 server.
func readRequestLine(c net.Conn, head []byte) ([]byte, bool) {
	var more [1024]byte
	for {
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			return head, isRequestLine(head[:i])
		}
		if len(head) >= maxRequestLine {
			return head, true
		}
		n, err := c.Read(more[:])
		head = append(head, more[:n]...)
		if err != nil {
			return head, true
		}
	}
}

// isRequestLine reports whether line (without its LF) may be an HTTP/1.x
// request line (RFC 9112 section 3): it ends with " HTTP/1." and a digit.
// An empty line, which may precede one, is let through.
func isRequestLine(line []byte) bool {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) == 0 {
		return true
	}
	const proto = " HTTP/1."
	n := len(line)
	return n > len(proto)+1 && string(line[n-len(proto)-1:n-1]) == proto && line[n-1] >= '0' && line[n-1] <= '9'
}

// replayConn is a connection whose first bytes were read by Sniff: Read
// returns them before reading on. It is used by one reader, as a net.Conn.
type replayConn struct {
	net.Conn
	head []byte
}

// Read returns the replayed bytes first, then reads from the connection.
func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		if len(c.head) == 0 {
			c.head = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// errNoPreface is what ServeNegotiated returns for a connection whose
// first bytes are not the client preface.
var errNoPreface = errors.New("h2serve: the connection does not start with the HTTP/2 client preface")

// readPreface reads the client preface off c, which a TLS handshake
// whose ALPN chose h2 has just set up (RFC 9113 section 3.2: the preface
// comes next), waiting at most timeout, and leaves c's read deadline
// cleared.
func readPreface(c net.Conn, timeout time.Duration) error {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	var buf [len(Preface)]byte
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		return fmt.Errorf("h2serve: read the client preface: %w", err)
	}
	if string(buf[:]) != Preface {
		return errNoPreface
	}
	return c.SetReadDeadline(time.Time{})
}
