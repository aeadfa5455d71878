package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/wsgate/wsgate/conf"
)

// alpnHTTP11 is the application protocol the TLS listener offers by
// default: the WebSocket handshake is HTTP/1.1. alpnH2 is what it offers
// with gateway.tls.h2, HTTP/2 first (crypto/tls picks the server's first
// protocol the client offers): a WebSocket is then an extended CONNECT
// stream (RFC 8441).
var (
	alpnHTTP11 = []string{"http/1.1"}
	alpnH2     = []string{"h2", "http/1.1"}
)

// CertSet is one loading of the TLS listener's files: the server
// certificates by the names in them, the client CAs, and the *tls.Config
// every handshake from then on gets. It is read-only once built, so safe
// for concurrent use; a reload builds a new one.
type CertSet struct {
	config   *tls.Config
	def      *tls.Certificate            // the first entry: no name matched
	exact    map[string]*tls.Certificate // lowercase DNS name
	wildcard map[string]*tls.Certificate // "example.com" for "*.example.com"
	files    []string                    // every file read, for the watcher
	pairs    []filePair                  // every certificate, in file order
	// managed is the ACME source (Certificates.SetManaged) asked for a
	// name no file covers; nil without [gateway.tls.acme].
	managed Managed
	// seq orders the loadings of one Certificates (see Load): a set read
	// later has a higher seq.
	seq uint64
}

// filePair is one [[gateway.tls.certificates]] entry as loaded.
type filePair struct {
	cert *tls.Certificate
	file string
}

// Managed is a source of certificates the gateway obtains itself (ACME),
// asked for a server name no certificate file covers, and for an ACME
// tls-alpn-01 validation handshake. It must be safe for concurrent use.
type Managed interface {
	// Certificate returns the certificate for hello, or an error when it
	// has none (the default file, if any, is served then).
	Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
}

// LoadTLS reads the certificate, key and CA files cfg's [gateway.tls]
// names. It returns nil without a TLS listener. A file that cannot be
// used is a *conf.Error naming the file, line and key it was set at.
func LoadTLS(cfg *conf.Config) (*CertSet, error) {
	t := &cfg.Gateway.TLS
	if t.Listen == "" {
		return nil, nil
	}
	bad := func(key string, err error) error {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) && cfg.FromRelative(pe.Path) {
			// Relative paths were once taken from the working directory.
			msg += " (a relative path is taken from the config file's directory)"
		}
		return &conf.Error{File: cfg.File, Line: cfg.Line(key), Key: key, Msg: msg}
	}
	set := &CertSet{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}}
	for i, c := range t.Certificates {
		key := fmt.Sprintf("gateway.tls.certificates[%d]", i)
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, bad(key, fmt.Errorf("load %s and %s: %w", c.CertFile, c.KeyFile, err))
		}
		if i == 0 {
			set.def = &pair
		}
		for _, name := range pair.Leaf.DNSNames {
			name = strings.ToLower(name)
			m, k := set.exact, name
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				m, k = set.wildcard, rest
			}
			if _, taken := m[k]; !taken { // the first certificate naming it wins
				m[k] = &pair
			}
		}
		set.files = append(set.files, c.CertFile, c.KeyFile)
		set.pairs = append(set.pairs, filePair{&pair, c.CertFile})
	}
	alpn := alpnHTTP11
	if t.H2 {
		alpn = alpnH2
	}
	set.config = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     alpn,
		GetCertificate: set.certificate,
	}
	if f := t.ClientCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, bad("gateway.tls.client_ca_file", fmt.Errorf("read client CAs: %w", err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, bad("gateway.tls.client_ca_file", fmt.Errorf("%s holds no PEM certificate", f))
		}
		set.config.ClientCAs = pool
		set.config.ClientAuth = tls.RequireAndVerifyClientCert
		set.files = append(set.files, f)
	}
	return set, nil
}

// certificate picks the certificate for a client's server name (SNI): one
// that names it exactly, else one whose wildcard covers its first label,
// else ACME's (see Managed), else the default. A client sending no name
// gets the default file, if there is one, ACME's only without.
func (set *CertSet) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := set.file(hello.ServerName); c != nil {
		return c, nil
	}
	if set.managed != nil && (hello.ServerName != "" || set.def == nil) {
		c, err := set.managed.Certificate(hello)
		if err == nil && c != nil {
			return c, nil
		}
		if set.def == nil {
			return nil, err
		}
	}
	return set.def, nil
}

// file is the certificate file that covers name, exactly or by a
// wildcard; nil when none does.
func (set *CertSet) file(name string) *tls.Certificate {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if c := set.exact[name]; c != nil {
		return c
	}
	if _, rest, ok := strings.Cut(name, "."); ok {
		if c := set.wildcard[rest]; c != nil {
			return c
		}
	}
	return nil
}

// Covers reports whether a certificate file covers name, exactly or by a
// wildcard: such a name is served from the file, never from ACME.
func (set *CertSet) Covers(name string) bool { return set != nil && set.file(name) != nil }

// FileCertificate is one certificate file as loaded.
type FileCertificate struct {
	File string            // the cert_file
	Leaf *x509.Certificate // its certificate
}

// Files lists the certificate files, in config order.
func (set *CertSet) Files() []FileCertificate {
	if set == nil {
		return nil
	}
	out := make([]FileCertificate, len(set.pairs))
	for i, p := range set.pairs {
		out[i] = FileCertificate{File: p.file, Leaf: p.cert.Leaf}
	}
	return out
}

// ReloadMetrics counts the loadings of the TLS files after one of them
// changed (see Certificates.Reload), by result. It must be safe for
// concurrent use.
type ReloadMetrics interface {
	TLSReloaded(ok bool)
}

// Certificates is the gateway's TLS listener state: the files loaded
// last, and the watcher that loads them again when one changes. It is safe
// for concurrent use.
type Certificates struct {
	set    atomic.Pointer[CertSet] // in force; nil without a TLS listener
	config *tls.Config             // the listener's: hands each handshake the set in force
	log    *slog.Logger
	loads  atomic.Uint64 // the seq of the last Load begun
	offer  sync.Mutex    // serialises Offer's compare and store

	// managed is the ACME source, set once before the first Load
	// (SetManaged); nil without [gateway.tls.acme].
	managed   Managed
	challenge *tls.Config // a tls-alpn-01 validation's: ALPN "acme-tls/1"

	mu      sync.Mutex // guards the fields below
	changed func()     // what a change of a watched file calls; set by Start
	files   []string   // watched now
	stop    context.CancelFunc
	started bool // Start has run: watch the files
	stopped bool // Stop has run: watch nothing
}

// NewCertificates returns the TLS listener's state, with no set in force
// and no file watched; log gets its lines.
func NewCertificates(log *slog.Logger) *Certificates {
	st := &Certificates{log: log}
	st.config = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: alpnHTTP11,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if st.challenge != nil && isACMEChallenge(hello) {
				return st.challenge, nil
			}
			set := st.set.Load()
			if set == nil {
				return nil, errors.New("no TLS certificates loaded")
			}
			return set.config, nil
		},
	}
	return st
}

// alpnACMETLS is the application protocol of an ACME tls-alpn-01
// validation (RFC 8737).
const alpnACMETLS = "acme-tls/1"

// isACMEChallenge reports whether hello is a tls-alpn-01 validation: it
// offers "acme-tls/1" and nothing else.
func isACMEChallenge(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == alpnACMETLS
}

// SetManaged makes m the source of the certificates no file covers, and
// of the tls-alpn-01 validations' (ALPN "acme-tls/1", which only those
// are offered). It is called once, before the first Load: ACME changes
// need a restart.
func (st *Certificates) SetManaged(m Managed) {
	st.managed = m
	st.challenge = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{alpnACMETLS},
		GetCertificate: m.Certificate,
	}
}

// Set is the set in force (nil without a TLS listener).
func (st *Certificates) Set() *CertSet { return st.set.Load() }

// Config is the TLS listener's *tls.Config: it hands each handshake the
// set in force.
func (st *Certificates) Config() *tls.Config { return st.config }

// Swap puts set in force for the next handshakes (connections already
// up keep what they negotiated) and, once Start has run, watches its
// files.
func (st *Certificates) Swap(set *CertSet) {
	st.set.Store(set)
	st.watch()
}

// Load reads cfg's TLS files as LoadTLS does and stamps the set with the
// order in which its reading began, for Offer. It takes no lock: a
// reload reads the files before it takes its own.
func (st *Certificates) Load(cfg *conf.Config) (*CertSet, error) {
	seq := st.loads.Add(1)
	set, err := LoadTLS(cfg)
	if set != nil {
		set.seq = seq
		set.managed = st.managed
	}
	return set, err
}

// LoadBegunAfter reports whether a Load began after the one that read set:
// the files may have changed since set read them, and a reading begun
// later may have been dropped or turned down in set's favour. The caller
// then reads them again.
func (st *Certificates) LoadBegunAfter(set *CertSet) bool {
	return set != nil && st.loads.Load() > set.seq
}

// Offer puts set (from Load) in force as Swap does, unless the set in
// force is the same files read later: loadings that ran side by side (a
// config reload and the watcher after a file changed) then keep the newer
// contents whichever finishes last. A set of other files (a reload that
// named new ones) always goes in. It reports whether set went in.
func (st *Certificates) Offer(set *CertSet) bool {
	st.offer.Lock()
	cur := st.set.Load()
	if set != nil && cur != nil && cur.seq > set.seq && slices.Equal(cur.files, set.files) {
		st.offer.Unlock()
		return false
	}
	st.set.Store(set)
	st.offer.Unlock()
	st.watch()
	return true
}

// watch (re)starts the watchers of the TLS files in force, unless they
// are the files watched already. A change of any of them calls changed,
// which loads them all again (see Reload).
func (st *Certificates) watch() {
	set := st.set.Load()
	var files []string
	if set != nil {
		files = slices.Clone(set.files)
		slices.Sort(files)
		files = slices.Compact(files)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.started || st.stopped || (st.stop != nil && slices.Equal(files, st.files)) {
		return
	}
	if st.stop != nil {
		st.stop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.stop, st.files = cancel, files
	for _, f := range files {
		if err := conf.Watch(ctx, f, 0, st.changed); err != nil {
			st.log.Warn("TLS file not watched: a change of it needs a reload", "file", f, "err", err)
		}
	}
}

// Start starts watching the TLS files (the gateway's Start): from now on
// a change of a file of the set in force calls changed, on a goroutine of
// the watcher's.
func (st *Certificates) Start(changed func()) {
	st.mu.Lock()
	st.started, st.changed = true, changed
	st.mu.Unlock()
	st.watch()
}

// Stop stops the watchers for good (the gateway's Shutdown).
func (st *Certificates) Stop() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.stopped = true
	if st.stop != nil {
		st.stop()
	}
}

// Reloaded puts in force the set that Load read from cfg, the config in
// force, again after one of the files changed (err is Load's), and counts
// the loading in m. On an error (a certificate half written, a key that
// does not match) the certificates in force stay. Tunnels are not touched:
// a TLS connection keeps the keys it negotiated. The caller reads with
// Load outside its own locks, and calls Reloaded once it knows cfg's TLS
// files are still the ones in force.
func (st *Certificates) Reloaded(cfg *conf.Config, set *CertSet, err error, m ReloadMetrics) {
	if err != nil || set == nil {
		if err == nil {
			err = errors.New("no TLS listener in the config in force")
		}
		m.TLSReloaded(false)
		st.log.Error("TLS files changed but did not load; the certificates in force stay", "err", err)
		return
	}
	m.TLSReloaded(true)
	if !st.Offer(set) {
		st.log.Info("TLS files reloaded; a reading of them begun later is in force already")
		return
	}
	st.log.Info("TLS files reloaded", "certificates", len(cfg.Gateway.TLS.Certificates))
}
