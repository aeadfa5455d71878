package upstream

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/wsgate/wsgate/conf"
)

// The application protocols offered by ALPN on a node connection: the
// HTTP/1.1 of a tunnel's upgrade, a health probe and a plain request, or
// the HTTP/2 of an "h2" pool's connections.
const (
	ALPNHTTP1 = "http/1.1"
	ALPNH2    = "h2"
)

// sessionCacheSize is how many TLS sessions a node's client config keeps
// for resumption: one is enough for the next dial, a few cover dials
// that race.
const sessionCacheSize = 16

// ErrNoALPNH2 is returned by a dial of an "h2" pool's connection when the
// node's TLS handshake did not select "h2" by ALPN: the node does not
// speak HTTP/2 over TLS, which fails it as a node that cannot be reached.
var ErrNoALPNH2 = errors.New("the node did not select h2 by ALPN: it does not serve HTTP/2 over TLS")

// NodeTLS is a pool's [pools.tls] as loaded: the roots and the client
// certificate read from its files, and the client config of each node,
// made on the node's first dial and kept. It is safe for concurrent use;
// its settings are read-only once loaded (a reload loads a new one).
type NodeTLS struct {
	base *tls.Config // roots, client certificate, versions; no server name
	name string      // server_name; "" for the node's host
	// digest is a hash of the settings and of the files' contents, so a
	// reload that read the same files keeps this NodeTLS and its
	// sessions (see Same).
	digest [sha256.Size]byte

	mu    sync.Mutex
	nodes map[nodeKey]*tls.Config
}

// nodeKey names a node's client config: its address and the ALPN
// protocol offered.
type nodeKey struct{ addr, alpn string }

// LoadTLS reads the files of every [pools.tls] of cfg and returns each
// such pool's NodeTLS by pool name (pools without one are absent). A file
// that cannot be read or parsed is a *conf.Error naming the config file,
// the line and the key (pools[i].tls.ca_file, pools[i].tls.cert_file).
func LoadTLS(cfg *conf.Config) (map[string]*NodeTLS, error) {
	var m map[string]*NodeTLS
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		if pc.TLS == nil {
			continue
		}
		t, key, err := loadNodeTLS(pc.TLS)
		if err != nil {
			key = "pools[" + strconv.Itoa(i) + "].tls." + key
			msg := err.Error()
			var pe *fs.PathError
			if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) && cfg.FromRelative(pe.Path) {
				msg += " (a relative path is taken from the config file's directory)"
			}
			return nil, &conf.Error{File: cfg.File, Line: cfg.Line(key), Key: key, Msg: msg}
		}
		if m == nil {
			m = make(map[string]*NodeTLS)
		}
		m[pc.Name] = t
	}
	return m, nil
}

// loadNodeTLS reads t's files; on error it names the key at fault.
func loadNodeTLS(t *conf.PoolTLS) (nt *NodeTLS, key string, err error) {
	h := sha256.New()
	field := func(b []byte) { // a fixed-size length first, so fields cannot run together
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(t.ServerName))
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, "ca_file", fmt.Errorf("read the nodes' CAs: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, "ca_file", fmt.Errorf("%s holds no PEM certificate", t.CAFile)
		}
		base.RootCAs = roots
		field(pem)
	} else {
		field(nil) // the system's roots, read by crypto/x509 once per process
	}
	if t.CertFile != "" {
		certPEM, err := os.ReadFile(t.CertFile)
		if err != nil {
			return nil, "cert_file", fmt.Errorf("read the client certificate: %w", err)
		}
		keyPEM, err := os.ReadFile(t.KeyFile)
		if err != nil {
			return nil, "key_file", fmt.Errorf("read the client certificate's key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, "cert_file", fmt.Errorf("load %s and %s: %w", t.CertFile, t.KeyFile, err)
		}
		base.Certificates = []tls.Certificate{pair}
		field(certPEM)
		field(keyPEM)
	}
	nt = &NodeTLS{base: base, name: t.ServerName, nodes: make(map[nodeKey]*tls.Config)}
	h.Sum(nt.digest[:0])
	return nt, "", nil
}

// Same reports whether t and u hold the same settings read from files of
// the same contents (both nil: neither has TLS).
func (t *NodeTLS) Same(u *NodeTLS) bool {
	if t == nil || u == nil {
		return t == u
	}
	return t.digest == u.digest
}

// Config returns the client config for the node at addr offering alpn
// (ALPNHTTP1 or ALPNH2): the pool's server_name, or the host of addr,
// as SNI and the name verified; its own session cache, so a tunnel's
// dial resumes the session of the one before it.
func (t *NodeTLS) Config(addr, alpn string) *tls.Config {
	k := nodeKey{addr, alpn}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.nodes[k]; c != nil {
		return c
	}
	c := t.base.Clone()
	c.ServerName = t.name
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		// An IP address is verified against the certificate's IP
		// addresses; crypto/tls then sends no SNI.
		c.ServerName = host
	}
	c.NextProtos = []string{alpn}
	c.ClientSessionCache = tls.NewLRUClientSessionCache(sessionCacheSize)
	t.nodes[k] = c
	return c
}

// forgetExcept drops the client configs (and their sessions) of the
// nodes not in addrs: a discovered pool's nodes come and go, and a
// NodeTLS a reload keeps would otherwise hold a config for every address
// it ever dialed. A node dialed again gets a new one.
func (t *NodeTLS) forgetExcept(addrs map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.nodes {
		if !addrs[k.addr] {
			delete(t.nodes, k)
		}
	}
}

// ClientConfig is Config for HTTP/1.1: the health checker's view (see
// health.Config.TLS).
func (t *NodeTLS) ClientConfig(addr string) *tls.Config { return t.Config(addr, ALPNHTTP1) }

// Handshake runs the client side of TLS on conn, a connection to the node
// at addr, offering alpn, within ctx. On error conn is closed. A handshake
// offering ALPNH2 that the node completes without selecting it is
// ErrNoALPNH2.
func (t *NodeTLS) Handshake(ctx context.Context, conn net.Conn, addr, alpn string) (*tls.Conn, error) {
	tc := tls.Client(conn, t.Config(addr, alpn))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	if alpn == ALPNH2 && tc.ConnectionState().NegotiatedProtocol != ALPNH2 {
		_ = conn.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, ErrNoALPNH2)
	}
	return tc, nil
}

// DialNode opens a connection to the node at addr as every connection of
// the pool to a node is opened: the dial (Dialer.Dial), then head (a
// PROXY header, which goes before TLS, as HAProxy sends it) written as it
// is, then with [pools.tls] the TLS handshake offering alpn, all within
// ConnectTimeout. wrap, when not nil, wraps the socket TLS then runs on
// (a tunnel's write clocks, see tunnel.NewTLSSocket); it is not called
// without TLS. The connection returned has no deadline set.
func (p *Pool) DialNode(addr string, head []byte, alpn string, wrap func(net.Conn) net.Conn) (net.Conn, error) {
	if p.TLS == nil && len(head) == 0 {
		return p.Dialer.Dial(addr) // bounded by its own timeout; no context to make
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.ConnectTimeout)
	defer cancel()
	return p.dialNode(ctx, addr, head, alpn, wrap)
}

// dialNode is DialNode within ctx.
func (p *Pool) dialNode(ctx context.Context, addr string, head []byte, alpn string, wrap func(net.Conn) net.Conn) (net.Conn, error) {
	conn, err := p.Dialer.Dial(addr)
	if err != nil {
		return nil, err
	}
	if len(head) > 0 {
		if d, ok := ctx.Deadline(); ok {
			_ = conn.SetWriteDeadline(d)
		}
		if _, err := conn.Write(head); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("write the PROXY header: %w", err)
		}
		_ = conn.SetWriteDeadline(time.Time{})
	}
	if p.TLS == nil {
		return conn, nil
	}
	if wrap != nil {
		conn = wrap(conn)
	}
	return p.TLS.Handshake(ctx, conn, addr, alpn)
}
