package health

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// rootsFor is a TLSConfigs trusting roots: every node gets the same
// config.
type rootsFor struct{ cfg *tls.Config }

func (r *rootsFor) ClientConfig(string) *tls.Config { return r.cfg }

// TestProbeOverTLS probes a node that serves TLS only: with Config.TLS
// trusting its certificate the probe passes and the node comes up; with
// roots that do not, each probe fails on the handshake and the node
// stays down.
func TestProbeOverTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "https://")
	trusted := x509.NewCertPool()
	trusted.AddCert(srv.Certificate())

	for _, tc := range []struct {
		name  string
		roots *x509.CertPool
		want  State
	}{
		{"trusted", trusted, StateUp},
		{"untrusted", x509.NewCertPool(), StateDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig()
			// httptest's certificate names example.com and 127.0.0.1.
			cfg.TLS = &rootsFor{&tls.Config{RootCAs: tc.roots, ServerName: "127.0.0.1"}}
			c, rec := startChecker(t, cfg)
			c.AddPending(newTarget(addr))
			waitProbes(t, rec, addr, cfg.Rise+1)
			st, _ := c.Status(addr)
			if st.State != tc.want {
				t.Errorf("state %v after %d probes (last %q), want %v", st.State, cfg.Rise+1, st.LastResult, tc.want)
			}
			if tc.want == StateDown && !strings.Contains(st.LastResult, "certificate") {
				t.Errorf("last result %q, want the certificate's failure", st.LastResult)
			}
		})
	}
}
