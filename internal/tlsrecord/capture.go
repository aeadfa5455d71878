package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// ErrNotCarried is what Capture.Take wraps when the connection stays with
// crypto/tls (TLS 1.2, a suite this package does not run, a handshake
// that did not go as this package expects): the *tls.Conn goes on as if
// there were no Capture.
var ErrNotCarried = errors.New("tlsrecord: connection not carried")

// errTaken is what the *tls.Conn's reads and writes get after Take.
var errTaken = errors.New("tlsrecord: the record layer was taken from crypto/tls")

// maxRecorded bounds the bytes of records a Capture keeps during a
// handshake (the server's flight after its Finished, the client's second
// flight): a client certificate chain fits; past it, the connection is
// not carried. A var for the tests.
var maxRecorded = 64 << 10

// The phases of a Capture.
const (
	handshaking = iota
	taken       // the Session reads and writes; the *tls.Conn cannot
	released    // crypto/tls keeps the connection; the Capture is a plain socket
)

// Capture is the socket under a TLS server connection whose record layer
// this package may take over after the handshake:
//
//	cc := tlsrecord.NewCapture(sock)
//	tc := tls.Server(cc, config) // config from ServerConfig
//	err := tc.Handshake()
//	s, err := cc.Take(tc.ConnectionState())
//
// During the handshake its reads end at the end of the record crypto/tls
// is reading, so that crypto/tls holds no byte past the client's
// Finished; the client's next bytes stay in the socket for the Session.
// Its key log (see ServerConfig) takes the application traffic secrets,
// and it keeps the records crypto/tls writes and reads from then on to
// learn the sequence numbers crypto/tls used (Take). Its methods are
// safe for concurrent use; crypto/tls is its one reader and writer.
type Capture struct {
	net.Conn
	phase atomic.Int32

	mu           sync.Mutex // guards the fields below
	clientSecret []byte     // CLIENT_TRAFFIC_SECRET_0
	serverSecret []byte     // SERVER_TRAFFIC_SECRET_0
	sent, read   []byte     // records written, read since the secrets were logged
	overflow     bool       // more than maxRecorded of them

	// The read position in the client's stream, which only crypto/tls
	// reads while handshaking: hdrN bytes of a header read, or left bytes
	// of a record's body to read.
	hdr  [headerLen]byte
	hdrN int
	left int
}

// NewCapture wraps the socket c for crypto/tls's server handshake.
func NewCapture(c net.Conn) *Capture { return &Capture{Conn: c} }

// NetConn returns the socket Capture wraps.
func (c *Capture) NetConn() net.Conn { return c.Conn }

// ServerConfig returns base for tls.Server over a Capture: each handshake
// runs with the config base (or base.GetConfigForClient) gives it, cloned
// with the Capture as its KeyLogWriter. On a socket that is no Capture
// the handshake runs as base says. Make it once per base, not per
// connection: the session ticket keys crypto/tls makes for a config are
// that config's, and a ticket sealed under one config's keys resumes
// only under the same config.
func ServerConfig(base *tls.Config) *tls.Config {
	out := base.Clone()
	out.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg := base
		if base.GetConfigForClient != nil {
			got, err := base.GetConfigForClient(hello)
			if err != nil {
				return nil, err
			}
			if got != nil {
				cfg = got
			}
		}
		c, ok := hello.Conn.(*Capture)
		if !ok {
			return cfg, nil
		}
		cfg = cfg.Clone()
		cfg.KeyLogWriter = keyLog{c}
		return cfg, nil
	}
	return out
}

// keyLog is a Capture's KeyLogWriter: crypto/tls writes it one line per
// secret, NSS key log format ("LABEL client_random secret", hex).
type keyLog struct{ c *Capture }

func (k keyLog) Write(line []byte) (int, error) {
	f := bytes.Fields(line)
	if len(f) != 3 {
		return len(line), nil
	}
	var dst *[]byte
	switch string(f[0]) {
	case "CLIENT_TRAFFIC_SECRET_0":
		dst = &k.c.clientSecret
	case "SERVER_TRAFFIC_SECRET_0":
		dst = &k.c.serverSecret
	default:
		return len(line), nil // TLS 1.2's, and the handshake secrets
	}
	secret := make([]byte, hex.DecodedLen(len(f[2])))
	if _, err := hex.Decode(secret, f[2]); err != nil {
		return 0, err // crypto/tls fails the handshake
	}
	k.c.mu.Lock()
	*dst = secret
	k.c.mu.Unlock()
	return len(line), nil
}

// Read reads the client's bytes for crypto/tls, while handshaking no
// further than the end of the current record.
func (c *Capture) Read(p []byte) (int, error) {
	switch c.phase.Load() {
	case taken:
		return 0, errTaken
	case released:
		return c.Conn.Read(p)
	}
	c.mu.Lock()
	if c.left == 0 {
		p = p[:min(len(p), headerLen-c.hdrN)]
	} else {
		p = p[:min(len(p), c.left)]
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if c.left == 0 {
		c.hdrN += copy(c.hdr[c.hdrN:], p[:n])
		if c.hdrN == headerLen {
			c.hdrN, c.left = 0, int(binary.BigEndian.Uint16(c.hdr[3:]))
		}
	} else {
		c.left -= n
	}
	if c.clientSecret != nil {
		c.read = c.record(c.read, p[:n])
	}
	c.mu.Unlock()
	return n, err
}

// Write writes crypto/tls's bytes to the client; after Take it writes
// nothing, so that no record goes out under a key the Session uses.
func (c *Capture) Write(p []byte) (int, error) {
	switch c.phase.Load() {
	case taken:
		return 0, errTaken
	case released:
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	if c.serverSecret != nil {
		c.sent = c.record(c.sent, p[:n])
	}
	c.mu.Unlock()
	return n, err
}

// record appends p to buf, within maxRecorded.
func (c *Capture) record(buf, p []byte) []byte {
	if len(buf)+len(p) > maxRecorded {
		c.overflow = true
		return buf
	}
	return append(buf, p...)
}

// Take returns the connection's Session once crypto/tls's handshake is
// done (cs is its ConnectionState), reading the client's next record and
// writing this end's next at the sequence numbers crypto/tls left: 0 for
// the client's (crypto/tls read no record under the client's traffic
// secret), and the count of records crypto/tls sealed under the server's
// (its session tickets, which are found by opening every record written
// since the secret was logged). From then on the *tls.Conn neither reads
// nor writes (closing it closes the socket); the Session and the socket
// (NetConn) are the connection. A connection this package does not carry
// gets an error wrapping ErrNotCarried and stays with crypto/tls.
func (c *Capture) Take(cs tls.ConnectionState) (*Session, error) {
	if !cs.HandshakeComplete {
		return nil, errors.New("tlsrecord: Take before the handshake is done")
	}
	if c.phase.Load() != handshaking {
		return nil, errors.New("tlsrecord: Take called twice")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.take(cs)
	c.clientSecret, c.serverSecret, c.sent, c.read = nil, nil, nil, nil
	if err != nil {
		c.phase.Store(released)
		return nil, fmt.Errorf("%w: %v", ErrNotCarried, err)
	}
	c.phase.Store(taken)
	return s, nil
}

func (c *Capture) take(cs tls.ConnectionState) (*Session, error) {
	if cs.Version != tls.VersionTLS13 {
		return nil, errors.New(tls.VersionName(cs.Version))
	}
	st := State{Suite: cs.CipherSuite, ReadSecret: c.clientSecret, WriteSecret: c.serverSecret}
	su := suiteByID(cs.CipherSuite)
	switch {
	case su == nil:
		return nil, errors.New("cipher suite " + tls.CipherSuiteName(cs.CipherSuite))
	case c.clientSecret == nil || c.serverSecret == nil:
		return nil, errors.New("no traffic secrets logged")
	case c.hdrN != 0 || c.left != 0:
		return nil, errors.New("crypto/tls stopped inside a record")
	case c.overflow:
		return nil, errors.New("handshake records over " + itoa(maxRecorded) + " bytes")
	}
	if n, err := opened(su, st.ReadSecret, c.read, nil); err != nil || n != 0 {
		return nil, errors.New("crypto/tls read records under the client's traffic secret")
	}
	var err error
	if st.WriteSeq, err = opened(su, st.WriteSecret, c.sent, isTicket); err != nil {
		return nil, err
	}
	return NewSession(st)
}

// isTicket reports whether an inner plaintext (content, type) is one
// NewSessionTicket, the one message crypto/tls's server writes under its
// application secret during a handshake.
func isTicket(p []byte) bool {
	return len(p) >= 5 && p[len(p)-1] == typeHandshake && p[0] == msgNewSessionTicket &&
		int(p[1])<<16|int(p[2])<<8|int(p[3]) == len(p)-5
}

// opened counts the records of stream (whole records, the first at a
// record's start) sealed under secret at sequence numbers 0, 1, ...:
// those that open, after those that do not (sealed under handshake keys
// before the secret). The inner plaintext of each that opens must pass
// want; with want nil none may open.
func opened(su *suite, secret, stream []byte, want func([]byte) bool) (uint64, error) {
	var k keys
	if err := k.set(su, secret, 0); err != nil {
		return 0, err
	}
	for len(stream) > 0 {
		if len(stream) < headerLen || len(stream) < headerLen+int(binary.BigEndian.Uint16(stream[3:])) {
			return 0, errors.New("a record cut short in the handshake's stream")
		}
		n := headerLen + int(binary.BigEndian.Uint16(stream[3:]))
		rec := stream[:n]
		stream = stream[n:]
		p, err := k.aead.Open(nil, k.next(), rec[headerLen:], rec[:headerLen])
		switch {
		case err != nil && k.seq > 0:
			return 0, errors.New("a record under a handshake key after one under the traffic secret")
		case err != nil:
			continue
		case want == nil || !want(bytes.TrimRight(p, "\x00")):
			return 0, errors.New("crypto/tls sealed a record this package does not expect under the traffic secret")
		}
		k.seq++
	}
	return k.seq, nil
}
