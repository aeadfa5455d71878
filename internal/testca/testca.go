// Package testca makes a throwaway certificate authority and the server and
// client certificates that tests and benchmarks need, so none of them ships
// or reads a key. It is for tests and benchmarks only.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority with an ECDSA P-256 key, valid for a day.
// Its methods are safe for concurrent use.
type CA struct {
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial atomic.Int64
}

// New makes a CA whose subject's common name is name.
func New(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, key: key}
	ca.serial.Store(1)
	return ca, nil
}

// Pool is a certificate pool holding the CA, for a client's RootCAs or a
// server's ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// PEM is the CA certificate, PEM-encoded.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS is the leaf as a tls.Certificate (a client's, say).
func (l *Leaf) TLS() tls.Certificate {
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		panic(err) // both were made by this package
	}
	return c
}

// SPKIHash is the base64 SHA-256 of the leaf's public key, as Chromium's
// --ignore-certificate-errors-spki-list takes it.
func (l *Leaf) SPKIHash() string {
	sum := sha256.Sum256(l.Cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// WriteFiles writes the certificate and key as dir/name.crt and
// dir/name.key and returns their paths.
func (l *Leaf) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, l.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// Server issues a server certificate for names: each is a DNS name
// ("*.example.test" too) or an IP address.
func (ca *CA) Server(names ...string) (*Leaf, error) {
	tmpl := ca.template(names[0])
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return ca.issue(tmpl)
}

// Client issues a client certificate with common name cn and, as SANs,
// the email address email and the URI uri (either may be empty).
func (ca *CA) Client(cn, email, uri string) (*Leaf, error) {
	tmpl := ca.template(cn)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if email != "" {
		tmpl.EmailAddresses = []string{email}
	}
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			return nil, fmt.Errorf("client uri: %w", err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	return ca.issue(tmpl)
}

func (ca *CA) template(cn string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"wsgate test"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func (ca *CA) issue(tmpl *x509.Certificate) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
