package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
)

// tlsFlags are the flags that make the relay serve TLS on its one port:
// HTTP/1.1 and HTTP/2 (ALPN h2) alike, for a gateway whose pool has
// [pools.tls].
type tlsFlags struct {
	cert, key, clientCA string
}

func (f *tlsFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate chain: serve TLS (ALPN h2 and http/1.1) instead of cleartext; needs -tls-key")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&f.clientCA, "tls-client-ca", "", "PEM CA certificates: require a client certificate they issued (needs -tls-cert)")
}

// check reports flags given without the ones they need.
func (f *tlsFlags) check() error {
	switch {
	case (f.cert == "") != (f.key == ""):
		return errors.New("-tls-cert and -tls-key go together")
	case f.clientCA != "" && f.cert == "":
		return errors.New("-tls-client-ca needs -tls-cert and -tls-key")
	}
	return nil
}

// wrap returns ln serving TLS with the flags' files, or ln itself when
// none is given. The files are read once, here.
func (f *tlsFlags) wrap(ln net.Listener) (net.Listener, error) {
	if f.cert == "" {
		return ln, nil
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		// h2 first: a gateway with protocol = "h2" asks for it, its
		// health probes and "http1" tunnels for http/1.1.
		NextProtos: []string{"h2", "http/1.1"},
		MinVersion: tls.VersionTLS12,
	}
	if f.clientCA != "" {
		pem, err := os.ReadFile(f.clientCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca: %s holds no PEM certificate", f.clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tls.NewListener(ln, cfg), nil
}
