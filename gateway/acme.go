package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/acmecert"
	"github.com/wsgate/wsgate/gateway/internal/admin"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/upgrade"
)

// acmeRenewCheck is how often ACME certificates are checked for renewal;
// tests shorten it.
var acmeRenewCheck = 10 * time.Minute

// acmeState is the gateway's [gateway.tls.acme]: the manager (nil
// without the table) and its counters, registered on the gateway's
// registry with the certificates' expiry.
type acmeState struct {
	m        *acmecert.Manager
	renewals *prometheus.CounterVec
	orders   *prometheus.CounterVec
	onDemand *prometheus.CounterVec
}

// newACME builds the ACME manager of cfg, if it has [gateway.tls.acme],
// and makes it the TLS listener's source for the names no file covers.
// It must run before the first loading of the TLS files; it orders
// nothing (startACME does).
func (s *Server) newACME(cfg *conf.Config) error {
	s.acme.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_tls_renewals_total",
		Help: "ACME certificate renewals this gateway ordered, by result (ok, error); on an error the certificate in force keeps serving and the renewal is retried (1, 2, 2, 5, 10... minutes apart, up to 6 hours).",
	}, []string{"result"})
	s.acme.orders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_tls_orders_total",
		Help: "ACME orders this gateway made for certificates it had none of (renewals are wsgate_tls_renewals_total), by result (ok, error). A gateway that found the certificate in the shared storage ordered nothing.",
	}, []string{"result"})
	s.acme.onDemand = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsgate_tls_on_demand_total",
		Help: "Server names unknown to the gateway that a handshake asked a certificate for on demand, by decision: ok (the ask URL approved it), refused (the ask URL refused it, failed or timed out), rate (over on_demand_rate: not asked).",
	}, []string{"result"})
	for _, r := range []string{"ok", "error"} {
		s.acme.renewals.WithLabelValues(r)
		s.acme.orders.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "refused", "rate"} {
		s.acme.onDemand.WithLabelValues(r)
	}
	a := cfg.Gateway.TLS.ACME
	if a == nil || cfg.Gateway.TLS.Listen == "" {
		return nil
	}
	m, err := acmecert.New(a, acmecert.Options{Log: s.log, Metrics: acmeMetrics{&s.acme}, RenewCheck: acmeRenewCheck})
	if err != nil {
		return &conf.Error{File: cfg.File, Line: cfg.Line("gateway.tls.acme"), Key: "gateway.tls.acme", Msg: err.Error()}
	}
	s.acme.m = m
	s.tls.SetManaged(m)
	return nil
}

// checkACMEReload refuses a reload that would leave the TLS listener
// without certificates: [gateway.tls.acme] applies at start only, so a
// config that adds it, with no certificate file, would take effect as no
// certificate at all until a restart.
func (s *Server) checkACMEReload(cfg *conf.Config) error {
	t := &cfg.Gateway.TLS
	if t.ACME == nil || s.acme.m != nil || len(t.Certificates) > 0 || t.Listen == "" {
		return nil
	}
	return &conf.Error{File: cfg.File, Line: cfg.Line("gateway.tls.acme"), Key: "gateway.tls.acme",
		Msg: "is new, and applies at a restart only: until then the TLS listener would have no certificate (restart the gateway, or keep a [[gateway.tls.certificates]] entry)"}
}

// readiness is what GET /readyz says: whether the gateway serves
// clients, and why not. A gateway that has not finished starting, or
// whose listener stopped accepting, is not ready; nor is one whose TLS
// listener has no certificate to serve: no file, and ACME has obtained
// none of its domains yet (the reason says when the last order failed),
// so a balancer sends no client to a handshake that would fail.
// A TLS listener whose ACME table has on_demand and no domains is ready:
// its certificates come with the handshakes.
func (s *Server) readiness() (bool, string) {
	switch {
	case s.broken.Load():
		return false, "a listener no longer accepts (see the log); restart the gateway"
	case !s.ready.Load():
		return false, "starting"
	}
	if why := s.tlsNotReady(); why != "" {
		return false, why
	}
	return true, ""
}

// tlsNotReady says why the TLS listener has no certificate to serve, or
// "" when it has one (see readiness).
func (s *Server) tlsNotReady() string {
	if s.tlsLn == nil || len(s.tls.Set().Files()) > 0 || s.acme.m == nil {
		return ""
	}
	domains := s.acme.m.Domains()
	if len(domains) == 0 || len(s.acme.m.Certificates()) > 0 {
		return ""
	}
	why := fmt.Sprintf("the TLS listener %s has no certificate to serve: ACME has not obtained one for %s yet", s.tlsLn.Addr(), strings.Join(domains, ", "))
	// Not the error itself: /readyz answers anyone who reaches the admin
	// listener, and an order's error may name hosts and paths. The log
	// line "ACME order failed" has it.
	if name, at := s.acme.m.LastFailure(); name != "" {
		why += fmt.Sprintf("; the last order (%s) failed at %s: the log's \"ACME order failed\" line says why", name, at.UTC().Format(time.RFC3339))
	}
	return why
}

// registerTLSMetrics registers the ACME counters and the certificates'
// expiry on the gateway's registry.
func (s *Server) registerTLSMetrics() {
	s.metrics.Reg.MustRegister(s.acme.renewals, s.acme.orders, s.acme.onDemand, expiryCollector{s})
}

// startACME begins managing the ACME domains once the listeners are open
// (the CA connects to them): loaded from storage, or ordered in the
// background.
func (s *Server) startACME() error {
	if s.acme.m == nil {
		return nil
	}
	return s.acme.m.Start(s.Addr(), s.TLSAddr())
}

// stopACME ends renewals and closes the ACME storage (Shutdown).
func (s *Server) stopACME() {
	if s.acme.m != nil {
		s.acme.m.Stop()
	}
}

// acmeChallengePath starts the path of every http-01 validation request.
var acmeChallengePath = []byte("/.well-known/acme-challenge/")

// withACMEChallenges answers http-01 validation requests before any route
// sees them, under handshake_rate_per_ip: a token this gateway or another
// of the fleet presented is answered, any other gets 404. Nothing under
// the path is ever proxied.
func (s *Server) withACMEChallenges(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.acme.m == nil {
		return next
	}
	answer := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.acme.m.HTTPChallenge(w, r) {
			http.Error(w, "no such ACME challenge", http.StatusNotFound)
		}
	}))
	return func(ctx *fasthttp.RequestCtx) {
		if !bytes.HasPrefix(ctx.Path(), acmeChallengePath) {
			next(ctx)
			return
		}
		// An answer not in memory is looked up in the storage: a flood
		// of made-up tokens from one address is held to
		// handshake_rate_per_ip like any request.
		if r := s.ipRate.Check(upgrade.ClientIP(ctx), s.current().retryAfter); r.Refused() {
			s.refuse(ctx, r)
			return
		}
		answer(ctx)
	}
}

// acmeMetrics counts the ACME manager's work.
type acmeMetrics struct{ st *acmeState }

func result(ok bool) string {
	if ok {
		return "ok"
	}
	return "error"
}

// Ordered counts a first order for a certificate.
func (m acmeMetrics) Ordered(ok bool) { m.st.orders.WithLabelValues(result(ok)).Inc() }

// Renewed counts a renewal.
func (m acmeMetrics) Renewed(ok bool) { m.st.renewals.WithLabelValues(result(ok)).Inc() }

// OnDemand counts an on-demand decision.
func (m acmeMetrics) OnDemand(r string) { m.st.onDemand.WithLabelValues(r).Inc() }

var (
	_ acmecert.Metrics = acmeMetrics{}
	_ edge.Managed     = (*acmecert.Manager)(nil)
)

// tlsCertificates lists the TLS listener's certificates: the files in
// force, then ACME's.
func (s *Server) tlsCertificates() []admin.Certificate {
	now := time.Now()
	var out []admin.Certificate
	set := s.tls.Set()
	for _, f := range set.Files() {
		out = append(out, admin.Certificate{Names: f.Leaf.DNSNames, Issuer: f.Leaf.Issuer.String(), NotAfter: f.Leaf.NotAfter,
			ExpiresIn: int64(f.Leaf.NotAfter.Sub(now).Seconds()), Source: "file", File: f.File})
	}
	if s.acme.m != nil {
		for _, c := range s.acme.m.Certificates() {
			out = append(out, admin.Certificate{Names: c.Names, Issuer: c.Issuer, NotAfter: c.NotAfter,
				ExpiresIn: int64(c.NotAfter.Sub(now).Seconds()), Source: "acme"})
		}
	}
	return out
}

// TLSCertificates lists the TLS listener's certificates (GET /api/tls).
func (v adminView) TLSCertificates() []admin.Certificate { return v.s.tlsCertificates() }

var _ admin.TLSLister = adminView{}

var descCertExpiry = prometheus.NewDesc("wsgate_tls_certificate_expiry_seconds",
	"Seconds until the certificate the TLS listener serves for a name expires (negative once expired), by name as in the certificate (\"*.example.com\" for a wildcard): a file's, or ACME's for a name no file covers.",
	[]string{"name"}, nil)

// expiryCollector reads the certificates' expiry at scrape time.
type expiryCollector struct{ s *Server }

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCertExpiry }

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	seen := map[string]bool{}
	emit := func(name string, notAfter time.Time) {
		name = strings.ToLower(name)
		if seen[name] {
			return // a name the first certificate naming it serves
		}
		seen[name] = true
		ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, notAfter.Sub(now).Seconds(), name)
	}
	set := c.s.tls.Set()
	for _, f := range set.Files() {
		for _, n := range f.Leaf.DNSNames {
			emit(n, f.Leaf.NotAfter)
		}
	}
	if c.s.acme.m == nil {
		return
	}
	for _, a := range c.s.acme.m.Certificates() {
		for _, n := range a.Names {
			if !set.Covers(n) {
				emit(n, a.NotAfter)
			}
		}
	}
}
