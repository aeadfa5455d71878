package loadgen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/pollread"
)

// TransportTLS is what a TLS handshake negotiated.
type TransportTLS struct {
	// Version is "1.2" or "1.3".
	Version string
	// ALPN is the protocol the server chose ("" when it chose none).
	ALPN string
}

func transportTLS(c *tlsConn) *TransportTLS {
	st := c.ConnectionState()
	return &TransportTLS{Version: TLSVersionName(st.Version), ALPN: st.NegotiatedProtocol}
}

// TLSVersionName names a TLS version as the report does: "1.2", "1.3".
func TLSVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS10:
		return "1.0"
	case tls.VersionTLS11:
		return "1.1"
	case tls.VersionTLS12:
		return "1.2"
	case tls.VersionTLS13:
		return "1.3"
	}
	return fmt.Sprintf("0x%04x", v)
}

// TLSOptions are the command line's TLS settings.
type TLSOptions struct {
	// CAFile holds PEM certificates trusted as roots instead of the
	// system's.
	CAFile string
	// Insecure skips the check of the server's certificate.
	Insecure bool
	// Version pins the TLS version: "1.2", "1.3", or "" for either.
	Version string
}

// Config builds the client configuration o describes.
func (o TLSOptions) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.Insecure}
	switch o.Version {
	case "":
	case "1.2":
		cfg.MaxVersion = tls.VersionTLS12
	case "1.3":
		cfg.MinVersion = tls.VersionTLS13
	default:
		return nil, fmt.Errorf("%w: -tls must be 1.2 or 1.3, got %q", ErrBadConfig, o.Version)
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: -ca: %w", ErrBadConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: -ca %s: no PEM certificate in it", ErrBadConfig, o.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// tlsConn is a client TLS connection whose reader can wait for the TCP
// socket without holding a buffer. It keeps the read deadline its user
// set, because tlsReader bounds its own reads with shorter ones.
type tlsConn struct {
	*tls.Conn
	tcp net.Conn

	mu  sync.Mutex
	rdl time.Time // the user's read deadline
}

func (c *tlsConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	return c.Conn.SetDeadline(t)
}

func (c *tlsConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	return c.Conn.SetReadDeadline(t)
}

// tlsGrace bounds how long a tlsReader holds a buffer in a Read that
// finds no whole record: after the data it returned (crypto/tls may hold
// further records it read with it) or once the socket turned readable (a
// record's tail may still be on its way).
const tlsGrace = 20 * time.Millisecond

// tlsReader reads a tlsConn into pooled buffers, holding none while the
// connection is idle: it waits for the TCP socket to turn readable with a
// MSG_PEEK through the runtime poller (as pollread does for a plain
// socket), then reads with a read deadline at most tlsGrace away, so a
// read that finds no whole record gives its buffer back and waits again.
// crypto/tls survives such a timeout (it is a temporary error; the bytes
// of a partial record stay in the connection). Only ReadLoop's goroutine
// uses it.
type tlsReader struct {
	c        *tlsConn
	raw      syscall.RawConn
	pool     *pollread.Pool
	buffered bool // the last read returned data: more may wait in crypto/tls
}

func newTLSReader(c *tlsConn, pool *pollread.Pool) *tlsReader {
	r := &tlsReader{c: c, pool: pool}
	if sc, ok := c.tcp.(syscall.Conn); ok {
		r.raw, _ = sc.SyscallConn()
	}
	return r
}

// Read returns a pooled buffer with the next plaintext bytes, as
// pollread.Reader.Read does.
func (r *tlsReader) Read() (*[]byte, int, error) {
	for {
		if !r.buffered {
			if err := r.wait(); err != nil {
				return nil, 0, err
			}
		}
		r.c.mu.Lock()
		user := r.c.rdl
		grace := time.Now().Add(tlsGrace)
		short := user.IsZero() || grace.Before(user)
		if short {
			_ = r.c.Conn.SetReadDeadline(grace)
		}
		r.c.mu.Unlock()
		bp := r.pool.Get()
		n, err := r.c.Read(*bp)
		if short {
			r.c.mu.Lock()
			_ = r.c.Conn.SetReadDeadline(r.c.rdl)
			r.c.mu.Unlock()
		}
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			r.pool.Put(bp)
			r.buffered = false
			if !short || r.expired() {
				return nil, 0, err
			}
			continue
		}
		r.buffered = n > 0 && err == nil
		if n == 0 && err == nil {
			r.pool.Put(bp)
			continue
		}
		return bp, n, err
	}
}

// expired reports whether the user's read deadline has passed.
func (r *tlsReader) expired() bool {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	return !r.c.rdl.IsZero() && !time.Now().Before(r.c.rdl)
}

// wait returns once the TCP socket is readable (data, its end or an
// error), holding no buffer, or with the error its deadline or a close
// gives.
func (r *tlsReader) wait() error {
	if r.raw == nil {
		return nil
	}
	var one [1]byte
	return r.raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	})
}
