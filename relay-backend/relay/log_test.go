package relay_test

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// TestParseErrorLogHidesCredentials pins a leak: fasthttp logs the first
// bytes of a request it cannot parse, and quotes a rejected header value
// whole, so a token in the query or in Authorization reached the relay's
// log at debug level.
func TestParseErrorLogHidesCredentials(t *testing.T) {
	var logs testproc.Buffer
	s := startRelay(t, relay.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, bad := range []string{
		"GET /room/x?access_token=query-secret HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer header-secret\r\nBad Name : x\r\n\r\n",
		"GET /room/x HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer value-secret\x01\r\n\r\n",
	} {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := c.Write([]byte(bad)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("malformed request: %v %v, want 400", resp, err)
		}
	}
	deadline := time.Now().Add(ioTimeout)
	for strings.Count(logs.String(), "error when reading request headers") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no parse error logged:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if out := logs.String(); strings.Contains(out, "secret") {
		t.Fatalf("a credential from the request reached the log:\n%s", out)
	}
}
