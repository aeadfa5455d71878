package e2e

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/proxyproto"
)

// edgeRequest opens a connection from the local address from to addr,
// writes head (a PROXY header, or nothing) and a WebSocket handshake for
// path, and reads the answer.
func edgeRequest(t *testing.T, addr, from string, head []byte, path string) (*http.Response, *bufio.Reader, net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := append(head, "GET "+path+" HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"...)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound, not a speed
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, br, c
	}
	resp.Body.Close()
	return resp, br, c
}

// closeCode reads one server frame and returns its close code, or 0.
func closeCode(br *bufio.Reader) int {
	var h [4]byte
	if _, err := io.ReadFull(br, h[:]); err != nil || h[0]&0x0f != 8 || h[1] < 2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(h[2:]))
}

// TestEdgeProxyProtocolAndAdmission runs issue 11 items 2 and 3 through
// the wsgate process and a relay-backend process: with proxy_protocol on,
// a trusted balancer's v1 and v2 headers get their clients to the relay,
// and the access log names the carried address; an untrusted peer is
// closed and counted; with the pool's admission rate at 1/s, burst 1, the
// next handshakes get 503 with Retry-After in [1, 2] on an http-503 route
// and 101 then close 1013 on a close-1013 route, counted as "admission".
func TestEdgeProxyProtocolAndAdmission(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 1, "")
	startGatewayCmd(t, st, "  [pools.admission]\n  rate = 1\n  burst = 1\n",
		"[log]\naccess = true\n[[routes]]\npath_prefix = \"/c/\"\npool = \"relay\"\noverflow = \"close-1013\"\n",
		withGatewayKeys(t, "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]\n"))

	v1 := []byte("PROXY TCP4 198.51.100.20 127.0.0.1 41000 443\r\n")
	resp, _, first := edgeRequest(t, st.gwAddr, "127.0.0.1", v1, "/room/edge?hello=1")
	if resp == nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("v1 from the trusted balancer: %+v, want 101", resp)
	}
	first.Close()
	waitOutput(t, st, "client=198.51.100.20:41000", 30*time.Second) // the tunnel's line, at its end

	v2 := proxyproto.AppendV2(nil, netip.MustParseAddrPort("198.51.100.21:41001"), netip.MustParseAddrPort("127.0.0.1:443"))
	got503, got1013 := false, false
	for i := 0; i < 10 && !(got503 && got1013); i++ {
		if !got1013 {
			resp, br, _ := edgeRequest(t, st.gwAddr, "127.0.0.1", v2, "/c/room/edge")
			if resp != nil && resp.StatusCode == http.StatusSwitchingProtocols && closeCode(br) == 1013 {
				got1013 = true
			}
		}
		if !got503 {
			resp, _, _ := edgeRequest(t, st.gwAddr, "127.0.0.1", v2, "/room/edge")
			if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
				ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if err != nil || ra < 1 || ra > 2 {
					t.Fatalf("503 with Retry-After %q, want 1 or 2", resp.Header.Get("Retry-After"))
				}
				got503 = true
			}
		}
	}
	if !got503 || !got1013 {
		t.Fatalf("at rate 1/s, burst 1: 503 seen %v, 1013 seen %v over 10 rounds", got503, got1013)
	}
	if n := metricValue(t, st.adminAddr, `wsgate_handshakes_total{result="admission"}`); n < 2 {
		t.Fatalf("handshakes{result=admission} = %v, want >= 2", n)
	}
	waitOutput(t, st, "client=198.51.100.21:41001", 30*time.Second)

	resp, br, _ := edgeRequest(t, st.gwAddr, "127.0.0.2", v1, "/room/edge")
	if resp != nil {
		t.Fatalf("untrusted peer answered %d, want the connection closed", resp.StatusCode)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("untrusted peer: connection left open")
		}
	}
	waitFor(t, func() bool {
		return metricValue(t, st.adminAddr, `wsgate_connections_refused_total{limit="proxy_untrusted"}`) == 1
	})
	waitOutput(t, st, "reason=proxy_untrusted", 30*time.Second)
}
