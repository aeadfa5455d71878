package edge

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestRefusalAnswer checks the bytes written to a refused connection parse
// as a complete HTTP answer that closes the connection.
func TestRefusalAnswer(t *testing.T) {
	for _, status := range []int{429, 503} {
		b := refusal(status, "limit", 7)
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), nil)
		if err != nil {
			t.Fatalf("%d: %v\n%s", status, err, b)
		}
		if resp.StatusCode != status || resp.Header.Get("Retry-After") != "7" || !resp.Close || resp.ContentLength != int64(len("wsgate: limit\n")) {
			t.Fatalf("%d: parsed %d %v", status, resp.StatusCode, resp.Header)
		}
	}
}

// TestPerIPLimitsKeyOnWholeAddress pins what "one client IP" is for
// max_conns_per_ip: the whole address, so two IPv6 addresses of one /64
// count apart, and an IPv4 client reached over an IPv6 socket
// (::ffff:192.0.2.1) counts as its IPv4 address. Its
// handshake_rate_per_ip half is the gateway's test of the same name.
func TestPerIPLimitsKeyOnWholeAddress(t *testing.T) {
	a, b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	l := NewLimiter(100, 1, 0)
	if s, _ := l.admit(a); s == nil {
		t.Fatal("first from 2001:db8::1 refused")
	}
	if s, _ := l.admit(b); s == nil {
		t.Fatal("2001:db8::2 refused for 2001:db8::1's connection")
	}
	if s, status := l.admit(a); s != nil || status != http.StatusTooManyRequests {
		t.Fatalf("second from 2001:db8::1: %v %d, want 429", s, status)
	}
	if got := remoteIP(addrConn{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 1}}); got != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("remoteIP of ::ffff:192.0.2.1 = %v, want 192.0.2.1", got)
	}
}

// addrConn is a net.Conn that only has a remote address.
type addrConn struct{ remote net.Addr }

func (c addrConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c addrConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c addrConn) Close() error                     { return nil }
func (c addrConn) LocalAddr() net.Addr              { return nil }
func (c addrConn) RemoteAddr() net.Addr             { return c.remote }
func (c addrConn) SetDeadline(time.Time) error      { return nil }
func (c addrConn) SetReadDeadline(time.Time) error  { return nil }
func (c addrConn) SetWriteDeadline(time.Time) error { return nil }
