package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/wsgate/wsgate/internal/h2spectest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestClientH2spec runs the HTTP/2 conformance suite, h2spec, against the
// gateway's TLS listener with h2 = true, requests routed to a relay: every
// case must pass, and the gateway must hold no stream afterwards.
func TestClientH2spec(t *testing.T) {
	f := newTLSFiles(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll))
	addr := e.srv.TLSAddr().(*net.TCPAddr)
	h2spectest.Run(t, h2spectest.Options{Host: addr.IP.String(), Port: addr.Port, TLS: true})
	waitH2Zero(t, e.srv)
}

// TestClientH2BodyOffItsContentLength pins the answer to a request body
// that does not match its content-length, and to content-lengths that
// disagree: both are malformed (RFC 9113 section 8.1.1), so the stream is
// reset with PROTOCOL_ERROR and the refusal is the client's
// (bad_request). Before, the body's forward failed and was counted as the
// node's (upstream_error, a 502), and two content-length fields got 502.
func TestClientH2BodyOffItsContentLength(t *testing.T) {
	f := newTLSFiles(t)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) }))
	t.Cleanup(node.Close)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true"), catchAll), "127.0.0.1:0", strings.TrimPrefix(node.URL, "http://"))
	srv := startGateway(t, cfg)
	hc := h2Dial(t, srv, f)
	post := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "gw.test"}, {Name: ":path", Value: "/echo"}}
	for _, tc := range []struct {
		name string
		h    http.Header
		body string
	}{
		{"short of it", http.Header{"Content-Length": {"10"}}, "12345"},
		{"beyond it", http.Header{"Content-Length": {"3"}}, "12345"},
		{"two that disagree", http.Header{"Content-Length": {"5", "6"}}, "12345"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := hc.OpenRequest(post, tc.h, false)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = s.Write([]byte(tc.body))
			_ = s.CloseWrite()
			deadline := time.Now().Add(10 * time.Second)
			for {
				if code, ok := s.Reset(); ok {
					if code != http2.ErrCodeProtocol {
						t.Fatalf("stream reset with %v, want PROTOCOL_ERROR", code)
					}
					break
				}
				if time.Now().After(deadline) {
					st, _, _, err := s.Response(time.Second)
					t.Fatalf("stream not reset: answered %d (%v)", st, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	// The first two reached the handler, which counts them; the third
	// was reset as its header block came in.
	deadline := time.Now().Add(10 * time.Second)
	for srv.metrics.HandshakeCounts()["bad_request"] < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("bad_request = %d, want 2 (%v)", srv.metrics.HandshakeCounts()["bad_request"], srv.metrics.HandshakeCounts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := srv.metrics.HandshakeCounts()["upstream_error"]; got != 0 {
		t.Fatalf("upstream_error = %d, want 0: the client's malformed body is not the node's failure", got)
	}
}
