package tunnel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// testTLS, set by WSGATE_TUNNEL_TLS=1 (make test runs it), makes every
// client connection of the suite a TLS connection over a TLSSocket, as the
// gateway's TLS listener makes it: such a tunnel runs on the goroutine
// engine, TLS being that engine's use in production.
var testTLS = os.Getenv("WSGATE_TUNNEL_TLS") == "1"

// clientPair returns the test client's end and the gateway's end of one
// client connection: loopback TCP, or TLS over it when the suite runs
// over TLS (testTLS).
func clientPair(t testing.TB) (client, gw net.Conn) {
	t.Helper()
	if !testTLS {
		return tcpPair(t)
	}
	return tlsPair(t)
}

// tlsPair returns both ends of one loopback TLS connection, handshake
// done; the server's end is over a TLSSocket.
func tlsPair(t testing.TB) (client, gw net.Conn) {
	t.Helper()
	rawClient, rawGW := tcpPair(t)
	return tlsOver(t, rawClient, NewTLSSocket(rawGW))
}

// tlsOver runs the TLS handshake between the test client's socket and
// the gateway's, and returns both TLS connections.
func tlsOver(t testing.TB, rawClient, rawGW net.Conn) (client, gw net.Conn) {
	t.Helper()
	cc := tls.Client(rawClient, &tls.Config{InsecureSkipVerify: true, ServerName: "gateway.test"})
	sc := tls.Server(rawGW, testServerConfig(t))
	done := make(chan error, 1)
	go func() {
		_ = sc.SetDeadline(time.Now().Add(10 * time.Second))
		done <- sc.Handshake()
	}()
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := cc.Handshake(); err != nil {
		t.Fatalf("TLS handshake (client): %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("TLS handshake (gateway): %v", err)
	}
	_ = cc.SetDeadline(time.Time{})
	_ = sc.SetDeadline(time.Time{})
	t.Cleanup(func() { cc.Close(); sc.Close() })
	return cc, sc
}

// tcpOf returns the TCP socket under c (a TLS connection, a TLSSocket).
func tcpOf(c net.Conn) *net.TCPConn {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case *TLSSocket:
			c = v.Conn
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

var (
	serverConfigOnce sync.Once
	serverConfig     *tls.Config
	serverConfigErr  error
)

// testServerConfig is the gateway's TLS configuration in the tests: a
// self-signed ECDSA certificate made once per run.
func testServerConfig(t testing.TB) *tls.Config {
	t.Helper()
	serverConfigOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			serverConfigErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: "gateway.test"},
			DNSNames:     []string{"gateway.test"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			serverConfigErr = err
			return
		}
		serverConfig = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	})
	if serverConfigErr != nil {
		t.Fatalf("test certificate: %v", serverConfigErr)
	}
	return serverConfig
}
