package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestRelayTLS runs relay-backend with -tls-cert, -tls-key and
// -tls-client-ca behind a gateway whose pool has [pools.tls] with a
// client certificate, over both protocols: members of one room reach each
// other through TLS connections to the relay (one per client with
// "http1", a few with "h2"), and the relay's health probe answers over
// TLS.
func TestRelayTLS(t *testing.T) {
	ca, err := testca.New("relay CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := srv.WriteFiles(dir, "relay")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ca.Client("wsgate", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ccert, ckey, err := cl.WriteFiles(dir, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	caFile := dir + "/ca.pem"
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []string{"http1", "h2"} {
		t.Run(protocol, func(t *testing.T) {
			st := &stack{}
			addr := testproc.FreeAddr(t)
			testproc.Start(t, "relay-1", testproc.Build(t, "./relay-backend"), "-listen", addr, "-id", "relay-1",
				"-tls-cert", cert, "-tls-key", key, "-tls-client-ca", caFile)
			st.relayAddr = []string{addr}
			startGateway(t, st, fmt.Sprintf("protocol = %q\n  [pools.tls]\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n", protocol, caFile, ccert, ckey), "")
			// /readyz is ready once a node is up: its health probe passed
			// over TLS.
			testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)
			a := dial(t, st.gwAddr, 1, "tls")
			b := dial(t, st.gwAddr, 2, "tls")
			if err := a.conn.WriteMessage(1, []byte("over tls")); err != nil {
				t.Fatal(err)
			}
			_ = b.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, msg, err := b.conn.ReadMessage(); err != nil || string(msg) != "over tls" {
				t.Fatalf("the other member got %q, %v", msg, err)
			}
			if protocol == "h2" {
				resp, err := http.Get("http://" + st.adminAddr + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// Two clients on the default one connection per poller.
				want := fmt.Sprintf(`wsgate_upstream_h2_connections{node=%q,pool="relay",state="open"} `, addr)
				if i := strings.Index(string(body), want); i < 0 || body[i+len(want)] == '0' {
					t.Errorf("/metrics: no HTTP/2 connection open to the relay (%s)", want)
				}
			}
			a.conn.Close()
			b.conn.Close()
		})
	}
}
