// Package acmecert obtains and renews the TLS listener's certificates
// from an ACME CA with certmagic: the names of [gateway.tls.acme] domains
// at start, other names at their first handshake when the operator's ask
// URL approves them (on demand, under a rate limit). It answers the CA's
// tls-alpn-01 challenges through the listener's GetCertificate and its
// http-01 challenges through HTTPChallenge, and keeps the account and the
// certificates in a directory or a Redis every gateway of a fleet shares.
//
// It reports to the gateway through Metrics, and knows nothing of the
// gateway's server.
package acmecert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/acmestore"
	"go.uber.org/zap"
)

// Metrics counts what the manager does. Its methods must be safe for
// concurrent use and return at once.
type Metrics interface {
	// Ordered counts an order for a certificate this gateway did not
	// have (not a renewal), by its result.
	Ordered(ok bool)
	// Renewed counts a renewal order, by its result.
	Renewed(ok bool)
	// OnDemand counts a decision on a name asked for on demand: "ok"
	// (ask approved it), "refused" (ask said no or failed), "rate" (over
	// on_demand_rate, not asked).
	OnDemand(result string)
}

// Options are the manager's settings that are not in the config.
type Options struct {
	// Log gets the manager's lines and certmagic's.
	Log *slog.Logger
	// Metrics counts orders, renewals and on-demand decisions.
	Metrics Metrics
	// RenewCheck is how often certificates are checked for renewal
	// (default 10 minutes; tests shorten it).
	RenewCheck time.Duration
	// LockTTL is the TTL of a Redis storage's locks (default
	// acmestore.DefaultLockTTL).
	LockTTL time.Duration
	// AskClient makes the ask calls (default: a client that follows no
	// redirect).
	AskClient *http.Client
}

// renewJitter spreads the renewals of a fleet's gateways: each renews
// when between 0.9 and 1.1 times a third of the certificate's life is left.
const renewJitter = 0.1

// Manager is one gateway's ACME state: the certmagic cache and configs
// and the storage. It is safe for concurrent use; Stop ends it.
type Manager struct {
	acme     *conf.ACME
	opt      Options
	log      *slog.Logger
	storage  certmagic.Storage
	closer   io.Closer // the Redis storage's; nil for a directory
	cache    *certmagic.Cache
	static   *certmagic.Config // domains: obtained at start, renewed in the background
	onDemand *certmagic.Config // other names; nil without on_demand
	issuers  []*certmagic.ACMEIssuer
	domains  map[string]bool
	bucket   *bucket
	// approvals remembers the ask URL's answers (see decide).
	approvals *recentNames[bool]
	// absent remembers names the storage was found not to hold (see
	// decide).
	absent *recentNames[struct{}]
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	names    map[string]bool // every name a managed certificate was cached for
	failName string          // the name of the last failed order or renewal; under mu
	failAt   time.Time       // and when it failed
}

// LoadCAs reads a PEM file of CA certificates (ca_file); nil for "".
func LoadCAs(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read ACME directory CAs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// New builds the manager of a (validated) [gateway.tls.acme] table. It
// reads ca_file and connects to no one: Start does.
func New(a *conf.ACME, opt Options) (*Manager, error) {
	roots, err := LoadCAs(a.CAFile)
	if err != nil {
		return nil, err
	}
	if opt.RenewCheck <= 0 {
		opt.RenewCheck = certmagic.DefaultRenewCheckInterval
	}
	if opt.AskClient == nil {
		opt.AskClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	m := &Manager{acme: a, opt: opt, log: opt.Log, domains: map[string]bool{}, names: map[string]bool{},
		bucket: newBucket(a.OnDemandRate, a.OnDemandBurst), approvals: newApprovals(approvalsMax), absent: newAbsentNames(absentMax)}
	for _, d := range a.Domains {
		m.domains[strings.ToLower(d)] = true
	}
	if conf.IsRedisStorage(a.Storage) {
		r, err := acmestore.Open(a.Storage, opt.LockTTL, opt.Log.With("component", "acme"))
		if err != nil {
			return nil, err
		}
		m.storage, m.closer = r, r
	} else {
		m.storage = &certmagic.FileStorage{Path: a.Storage}
	}
	zl := zap.New(slogCore{log: opt.Log.With("component", "acme")})
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   m.configFor,
		RenewCheckInterval: opt.RenewCheck,
		Logger:             zl,
	})
	ratio := (1.0 / 3) * (1 + renewJitter*(2*rand.Float64()-1))
	newConfig := func(onDemand *certmagic.OnDemandConfig) *certmagic.Config {
		cfg := certmagic.New(m.cache, certmagic.Config{
			RenewalWindowRatio: ratio,
			Storage:            m.storage,
			Logger:             zl,
			OnDemand:           onDemand,
			OnEvent:            m.event,
			ShouldEmitFunc:     wantEvent,
		})
		iss := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
			CA:           a.Directory,
			Email:        a.Email,
			Agreed:       true,
			TrustedRoots: roots,
			Logger:       zl,
		})
		cfg.Issuers = []certmagic.Issuer{iss}
		m.issuers = append(m.issuers, iss)
		return cfg
	}
	m.static = newConfig(nil)
	if len(a.Domains) > 0 {
		m.static.DefaultServerName = strings.ToLower(a.Domains[0])
	}
	if a.OnDemand {
		m.onDemand = newConfig(&certmagic.OnDemandConfig{DecisionFunc: m.decide})
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// configFor is the cache's GetConfigForCert: a domain's certificate is
// the static config's, any other the on-demand one's.
func (m *Manager) configFor(c certmagic.Certificate) (*certmagic.Config, error) {
	if m.onDemand == nil {
		return m.static, nil
	}
	for _, n := range c.Names {
		if m.domains[strings.ToLower(n)] {
			return m.static, nil
		}
	}
	return m.onDemand, nil
}

// Start begins managing the domains, once the listeners are open on the
// ports the CA will connect to: httpAddr is a plain listener's address
// (http-01), tlsAddr the TLS listener's (tls-alpn-01). In the
// background, once the storage answers, certificates in it are loaded and
// the others ordered, retried on failure.
func (m *Manager) Start(httpAddr, tlsAddr net.Addr) error {
	for _, iss := range m.issuers {
		// certmagic starts a challenge server of its own on the challenge
		// ports unless they are taken: they are ours, so it finds them
		// taken and leaves the answers to our listeners.
		if host, port, ok := hostPort(httpAddr); ok {
			iss.ListenHost, iss.AltHTTPPort = host, port
		}
		if _, port, ok := hostPort(tlsAddr); ok {
			iss.AltTLSALPNPort = port
		}
	}
	if len(m.acme.Domains) > 0 {
		go m.manageDomains()
	}
	return nil
}

// storageProbe is a key read to see whether the storage answers.
const storageProbe = "wsgate/storage-probe"

// manageDomains hands the domains to certmagic once the storage answers:
// certmagic gives up on a name for good when it cannot read the storage
// (as opposed to finding nothing there), so a Redis that is down while
// the gateway starts must not cost the gateway its certificates until a
// restart. It waits 1s, 2s, 4s... up to a minute between tries.
func (m *Manager) manageDomains() {
	wait := time.Second
	for {
		_, err := m.storage.Load(m.ctx, storageProbe)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			break
		}
		m.log.Warn("ACME storage unreachable; the certificates are loaded or ordered once it answers", "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Minute)
	}
	if err := m.static.ManageAsync(m.ctx, m.acme.Domains); err != nil {
		m.log.Error("ACME: certificates not managed", "err", err)
	}
}

// hostPort splits a listener's address; an unspecified host is "".
func hostPort(a net.Addr) (string, int, bool) {
	if a == nil {
		return "", 0, false
	}
	host, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = ""
	}
	return host, port, true
}

// Stop ends renewals and on-demand orders, releases the storage's locks
// and closes it.
func (m *Manager) Stop() {
	m.cancel()
	m.cache.Stop()
	if m.closer != nil {
		_ = m.closer.Close()
	}
}

// errNoCertificate is a handshake's error for a name the manager has no
// certificate for and will not order.
var errNoCertificate = errors.New("acme: no certificate for this server name")

// Certificate is the TLS listener's certificate for hello from ACME: a
// pending tls-alpn-01 challenge's for a validation (ALPN "acme-tls/1"
// alone, and a server name), a domain's, or on demand an approved name's,
// which the handshake waits for. It returns an error when it has none;
// the listener then serves its default file, if any, except to a
// validation, whose handshake fails.
func (m *Manager) Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	switch {
	case IsChallenge(hello):
		// A validation names the domain it validates (RFC 8737 section
		// 3): without a name certmagic would hand out the first domain's
		// certificate, not a challenge's. Without on_demand the CA
		// validates the domains only: any other name is a stranger's, not
		// worth a storage lookup. Otherwise certmagic answers with the
		// pending challenge's certificate, or an error: never a
		// certificate of the site's.
		if name == "" || (m.onDemand == nil && !m.domains[name]) {
			return nil, errNoCertificate
		}
		return m.static.GetCertificate(hello)
	case m.domains[name]:
		return m.static.GetCertificate(hello)
	case name == "" && len(m.domains) > 0:
		return m.static.GetCertificate(hello) // the first domain's (DefaultServerName)
	case m.onDemand == nil || name == "" || net.ParseIP(name) != nil:
		return nil, errNoCertificate
	}
	return m.onDemand.GetCertificate(hello)
}

// IsChallenge reports whether hello is an ACME CA's tls-alpn-01
// validation (RFC 8737): ALPN "acme-tls/1" and nothing else.
func IsChallenge(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol
}

// HTTPChallenge answers an http-01 validation request (GET
// /.well-known/acme-challenge/TOKEN) from what this gateway or, through
// the storage, another of the fleet presented; it reports whether it
// answered.
func (m *Manager) HTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	for _, iss := range m.issuers {
		if iss.HandleHTTPChallenge(w, r) {
			return true
		}
	}
	return false
}

// decide is the on-demand DecisionFunc, which certmagic calls before it
// loads a name's certificate from the storage, orders it, or renews it:
// the ask URL's approval within ask_timeout, remembered (see newApprovals).
// An ask call takes a token of the on_demand_rate bucket, but for a name
// whose certificate is in the storage: approved before, by this gateway
// or another of the fleet, it is asked about again whatever strangers'
// names took the tokens (the ask URL's refusal of it is remembered for a
// while). Over the rate, a name is looked up in the storage, and refused
// without an ask call unless found; a name not found is not looked up
// again for absentFor (see newAbsentNames), so that a stranger's name asked
// for at every handshake costs the storage one lookup, not one each.
func (m *Manager) decide(ctx context.Context, name string) error {
	now := time.Now()
	if ok, known := m.approvals.get(name, now); known {
		if ok {
			return nil
		}
		m.opt.Metrics.OnDemand("refused")
		return fmt.Errorf("ask refused %s (remembered)", name)
	}
	stored := false
	if !m.bucket.take(now) {
		if _, absent := m.absent.get(name, now); !absent {
			var found error
			stored, found = m.stored(ctx, name)
			if !stored && errors.Is(found, fs.ErrNotExist) {
				m.absent.note(name, struct{}{}, now) // a failed lookup is not remembered
			}
		}
		if !stored {
			m.opt.Metrics.OnDemand("rate")
			return fmt.Errorf("on_demand_rate exceeded: %s not asked about", name)
		}
	}
	err := m.ask(ctx, name)
	if err == nil || stored {
		m.approvals.note(name, err == nil, time.Now())
	}
	return err
}

// stored reports whether the storage holds a certificate for name from
// the on-demand issuer; when it does not, err says why: fs.ErrNotExist
// when the storage said so, another error when it could not be asked.
func (m *Manager) stored(ctx context.Context, name string) (bool, error) {
	err := fs.ErrNotExist
	for _, iss := range m.onDemand.Issuers {
		_, serr := m.storage.Stat(ctx, certmagic.StorageKeys.SiteCert(iss.IssuerKey(), name))
		if serr == nil {
			return true, nil
		}
		if !errors.Is(serr, fs.ErrNotExist) {
			err = serr
		}
	}
	return false, err
}

// ask asks the ask URL about name within ask_timeout, and counts its
// answer.
func (m *Manager) ask(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, m.acme.AskTimeout.Duration)
	defer cancel()
	u := m.acme.Ask + "?domain=" + url.QueryEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		m.opt.Metrics.OnDemand("refused")
		return err
	}
	resp, err := m.opt.AskClient.Do(req)
	if err != nil {
		m.opt.Metrics.OnDemand("refused")
		m.log.Warn("ACME ask URL failed; name refused", "name", name, "err", err)
		return fmt.Errorf("ask %s: %w", name, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		m.opt.Metrics.OnDemand("refused")
		return fmt.Errorf("ask refused %s: %s", name, resp.Status)
	}
	m.opt.Metrics.OnDemand("ok")
	return nil
}

// wantEvent is certmagic's ShouldEmitFunc: the events event reads, so
// that no other (tls_get_certificate, at every handshake) is built.
func wantEvent(event string) bool {
	switch event {
	case "cached_managed_cert", "cert_obtained", "cert_failed":
		return true
	}
	return false
}

// event is certmagic's OnEvent: orders and renewals counted and logged,
// and the names of the certificates cached, for Certificates.
func (m *Manager) event(_ context.Context, event string, data map[string]any) error {
	switch event {
	case "cached_managed_cert":
		if sans, ok := data["sans"].([]string); ok {
			m.mu.Lock()
			for _, n := range sans {
				m.names[strings.ToLower(n)] = true
			}
			m.mu.Unlock()
		}
	case "cert_obtained", "cert_failed":
		ok := event == "cert_obtained"
		if renewal, _ := data["renewal"].(bool); renewal {
			m.opt.Metrics.Renewed(ok)
		} else {
			m.opt.Metrics.Ordered(ok)
		}
		if !ok {
			m.mu.Lock()
			m.failName, m.failAt = fmt.Sprint(data["identifier"]), time.Now()
			m.mu.Unlock()
			m.log.Error("ACME order failed; the certificate in force (if any) keeps serving, and the order is retried", "name", data["identifier"], "renewal", data["renewal"], "err", data["error"])
		} else {
			m.log.Info("ACME certificate obtained", "name", data["identifier"], "renewal", data["renewal"])
		}
	}
	return nil
}

// Domains are the names of the table's domains, obtained at start.
func (m *Manager) Domains() []string { return m.acme.Domains }

// LastFailure is the name of the last order or renewal that failed, and
// when it did; "" when none has. Its error is in the log.
func (m *Manager) LastFailure() (name string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failName, m.failAt
}

// Info describes one certificate the manager serves.
type Info struct {
	Names    []string
	Issuer   string
	NotAfter time.Time
	Leaf     *x509.Certificate
}

// Certificates lists the certificates in the manager's cache, each once,
// by their first name.
func (m *Manager) Certificates() []Info {
	m.mu.Lock()
	names := make([]string, 0, len(m.names))
	for n := range m.names {
		names = append(names, n)
	}
	m.mu.Unlock()
	slices.Sort(names)
	var out []Info
	seen := map[string]bool{}
	for _, n := range names {
		for _, c := range m.cache.AllMatchingCertificates(n) {
			leaf := c.Leaf
			if leaf == nil || seen[string(leaf.Raw)] {
				continue
			}
			seen[string(leaf.Raw)] = true
			out = append(out, Info{Names: c.Names, Issuer: leaf.Issuer.String(), NotAfter: leaf.NotAfter, Leaf: leaf})
		}
	}
	return out
}

// bucket is a token bucket: rate tokens a second up to burst. It is safe
// for concurrent use.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate, burst int) *bucket {
	return &bucket{rate: float64(rate), burst: float64(burst), tokens: float64(burst)}
}

// take takes a token at now, reporting whether there was one.
func (b *bucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
