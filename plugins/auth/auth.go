package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/url"
	"time"
)

// Authenticator decides WebSocket handshakes. A plugin implements it and
// hands it to Serve; the gateway holds a client-side implementation that
// calls the plugin process.
//
// Configure is called once, before any Authenticate. Authenticate is called
// concurrently from many goroutines, so an implementation must be safe for
// concurrent use. Both must honour ctx: the gateway cancels it when its
// per-call timeout (the plugin's timeout in the config, default 2s) passes.
//
// Authenticate returns a Decision for every request it can judge, allow or
// deny; it returns an error only when it cannot decide (a dependency is
// down), and the gateway then refuses the handshake with 503.
type Authenticator interface {
	// Configure receives the plugin's [plugins.config] table. Values have
	// the TOML types: string, int64, float64, bool, []any and
	// map[string]any (a TOML date-time arrives as an RFC 3339 string).
	// Return an error wrapping ErrInvalidConfig for a bad config; the
	// gateway then does not use the plugin. DecodeConfig decodes the table
	// into a struct, rejecting unknown keys. ctx carries the directory of
	// the gateway's config file (ConfigDir), from which a relative path in
	// the table is taken (ConfigPath).
	Configure(ctx context.Context, config map[string]any) error
	// Authenticate decides one handshake.
	Authenticate(ctx context.Context, req *Request) (*Decision, error)
}

// CacheKeyer is implemented by an Authenticator whose decisions may be
// cached by the gateway. CacheKey is called once, after a successful
// Configure, and names every request part a decision depends on:
//
//	"header:NAME"  all values of a request header
//	"query:NAME"   all values of a query parameter
//	"route", "host", "path", "client_ip"
//
// The gateway reuses a decision with a CacheTTL for any later request whose
// named parts are equal, without calling the plugin. An Authenticator that
// does not implement CacheKeyer, or returns no parts, is called every time.
type CacheKeyer interface {
	CacheKey() []string
}

// Request is what the gateway knows about one WebSocket handshake. It is
// plain data; the plugin may read it from any goroutine but must not keep
// it after Authenticate returns.
type Request struct {
	// Method is the HTTP method (always "GET" for a valid handshake).
	Method string
	// Host is the Host header.
	Host string
	// Path is the request path, without the query.
	Path string
	// RawQuery is the query string without the "?".
	RawQuery string
	// Header holds the request headers, keys in canonical form.
	Header http.Header
	// ClientAddr is the client's address, ip:port, as the gateway sees it.
	ClientAddr string
	// TLS describes the client's TLS connection; nil on a plain listener.
	TLS *TLSInfo
	// Route identifies the route the request matched, as the gateway names
	// it in its logs (host and path prefix, such as "*/room/").
	Route string
}

// Query parses RawQuery; malformed pairs are skipped.
func (r *Request) Query() url.Values {
	v, _ := url.ParseQuery(r.RawQuery)
	return v
}

// TLSInfo describes the client's TLS connection.
type TLSInfo struct {
	// Version is the TLS version, such as "TLS 1.3".
	Version string
	// CipherSuite is the negotiated cipher suite's name.
	CipherSuite string
	// ServerName is the SNI the client sent.
	ServerName string
	// NegotiatedProtocol is the ALPN protocol, if any.
	NegotiatedProtocol string
	// PeerCertificates are the client's certificates, DER, leaf first:
	// the chain the gateway verified against gateway.tls.client_ca_file,
	// ending with that CA; empty without client certificates.
	PeerCertificates [][]byte
}

// ParsePeerCertificates parses PeerCertificates.
func (t *TLSInfo) ParsePeerCertificates() ([]*x509.Certificate, error) {
	certs := make([]*x509.Certificate, 0, len(t.PeerCertificates))
	for _, der := range t.PeerCertificates {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// Decision is a plugin's answer to one handshake. The zero value denies
// with 403. Allow and Deny build the common cases.
type Decision struct {
	// Allow admits the client. When false the handshake is refused with
	// Status.
	Allow bool
	// Status is the HTTP status of a deny, 400-599 (default 403).
	Status int
	// Reason is a short text for the deny answer and the gateway's log;
	// it reaches the client, so keep secrets out of it.
	Reason string
	// Headers are added to the request the gateway sends upstream,
	// replacing any the client sent under the same name; an empty value
	// removes the client's header. Use it for identity (X-User-Id) and
	// list every header you own, so a client cannot forge one. Names must
	// be HTTP tokens and values must not contain CR, LF or NUL, or the
	// gateway rejects the decision.
	Headers map[string]string
	// ResponseHeaders are set on the gateway's answer to a client it
	// refuses (Allow false), such as the WWW-Authenticate challenge of a
	// 401; ignored on an allow. Names must be WWW-Authenticate,
	// Retry-After, Cache-Control or start with X- (in any case), and values
	// must not contain CR, LF or NUL, or the gateway rejects the decision
	// (the client gets 503). A 401 without WWW-Authenticate gets the
	// gateway's default, Bearer realm="wsgate".
	ResponseHeaders map[string]string
	// AffinityKey, if set, is offered to the pool's balancer as the key
	// of a hash policy (for example a tenant id); default none.
	AffinityKey string
	// CacheTTL is how long the gateway may reuse this decision for requests
	// with the same cache key (see CacheKeyer); 0 means not cached. The
	// gateway never keeps it past Expires.
	CacheTTL time.Duration
	// Expires is when the credential stops being valid (a JWT's exp); zero
	// means no expiry is known.
	Expires time.Time
	// Subject identifies the principal (a JWT's sub, a user id), for logs
	// and revocation; default none.
	Subject string
	// CredentialID identifies the credential itself, so an admin can
	// revoke one token or key without revoking its subject: a JWT's jti,
	// or the hex SHA-256 of the secret (see CredentialHash); default none.
	CredentialID string
}

// CredentialHash is the CredentialID of a secret credential: its hex
// SHA-256, which an admin can compute from the secret (printf %s KEY |
// sha256sum) without the gateway ever storing the secret.
func CredentialHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Allow returns a Decision that admits the client and adds headers
// upstream.
func Allow(headers map[string]string) *Decision {
	return &Decision{Allow: true, Headers: headers}
}

// Deny returns a Decision that refuses the handshake with status and
// reason.
func Deny(status int, reason string) *Decision {
	return &Decision{Status: status, Reason: reason}
}
