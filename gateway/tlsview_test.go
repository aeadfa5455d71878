package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/internal/browsertest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// TestTLSCertificatesInAPIAndDashboard lists the TLS listener's file
// certificates in GET /api/tls, in wsgate_tls_certificate_expiry_seconds
// by name (a wildcard as written), and in the dashboard's certificates
// table, loaded in headless Chromium.
func TestTLSCertificatesInAPIAndDashboard(t *testing.T) {
	files := newTLSFiles(t)
	cfg := tlsGatewayConfig("", files.table(testproc.FreeAddr(t), ""), catchAll)
	cfg = strings.Replace(cfg, "[admin]\nlisten = \"\"", "[admin]\nlisten = \"127.0.0.1:0\"", 1)
	e := newEnv(t, 1, cfg)

	code, body := e.admin("GET", "/api/tls", "")
	var got admin.TLS
	if err := json.Unmarshal(body, &got); code != 200 || err != nil {
		t.Fatalf("GET /api/tls: %d %v %s", code, err, body)
	}
	if len(got.Certificates) != 3 {
		t.Fatalf("GET /api/tls lists %d certificates, want 3: %s", len(got.Certificates), body)
	}
	for i, c := range got.Certificates {
		if c.Source != "file" || c.File != files.certs[i][0] || c.ExpiresIn <= 0 || !strings.Contains(c.Issuer, "wsgate test CA") {
			t.Errorf("certificate %d: %+v", i, c)
		}
	}
	if got.Certificates[1].Names[0] != "*.example.test" {
		t.Errorf("second certificate's names %v", got.Certificates[1].Names)
	}
	mf := e.scrape()["wsgate_tls_certificate_expiry_seconds"]
	names := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			names[l.GetValue()] = m.GetGauge().GetValue() > 0
		}
	}
	for _, n := range []string{"gw.test", "*.example.test", "a.example.test"} {
		if !names[n] {
			t.Errorf("no positive wsgate_tls_certificate_expiry_seconds{name=%q}; have %v", n, names)
		}
	}

	ctx := browsertest.Start(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+e.srv.AdminAddr().String()+"/"),
		chromedp.WaitVisible(`tr.cert[data-source="file"]`)); err != nil {
		t.Fatalf("browser: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr.cert").length`))
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	if rows != 3 {
		t.Errorf("dashboard shows %d certificate rows, want 3", rows)
	}
}
