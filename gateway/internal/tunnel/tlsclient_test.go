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

	"github.com/wsgate/wsgate/internal/tlsrecord"
)

// testTLS, set by WSGATE_TUNNEL_TLS=1 (make test runs it), makes every
// client connection of the suite a TLS 1.3 connection as the gateway's TLS
// listener makes it: crypto/tls's handshake over a tlsrecord.Capture on a
// TLSSocket, then a RecordConn, whose records a tunnel runs on a poller
// (engine "epoll-tls"), or on goroutines with WSGATE_TUNNEL_ENGINE.
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

// tlsPair returns both ends of one loopback TLS 1.3 connection, handshake
// done, as the gateway's listener makes it: the gateway's end is a
// RecordConn over a TLSSocket.
func tlsPair(t testing.TB) (client, gw net.Conn) {
	t.Helper()
	rawClient, rawGW := tcpPair(t)
	sock := NewTLSSocket(rawGW)
	capture := tlsrecord.NewCapture(sock)
	client, sc := tlsOverConfig(t, rawClient, capture, recordServerConfig(t))
	s, err := capture.Take(sc.(*tls.Conn).ConnectionState())
	if err != nil {
		t.Fatalf("the record layer was not taken: %v", err)
	}
	gw = NewRecordConn(sock, sc.(*tls.Conn).ConnectionState(), s)
	t.Cleanup(func() { gw.Close() })
	return client, gw
}

// cryptoTLSPair is tlsPair with crypto/tls running the records: the
// gateway's end is a *tls.Conn over a TLSSocket (a TLS 1.2 client's, on
// goroutines).
func cryptoTLSPair(t testing.TB) (client, gw net.Conn) {
	t.Helper()
	rawClient, rawGW := tcpPair(t)
	return tlsOver(t, rawClient, NewTLSSocket(rawGW))
}

var (
	recordConfigOnce sync.Once
	recordConfig     *tls.Config
)

// recordServerConfig is testServerConfig for handshakes over a Capture.
func recordServerConfig(t testing.TB) *tls.Config {
	base := testServerConfig(t)
	recordConfigOnce.Do(func() { recordConfig = tlsrecord.ServerConfig(base) })
	return recordConfig
}

// tlsOver runs the TLS handshake between the test client's socket and
// the gateway's, and returns both TLS connections.
func tlsOver(t testing.TB, rawClient, rawGW net.Conn) (client, gw net.Conn) {
	t.Helper()
	return tlsOverConfig(t, rawClient, rawGW, testServerConfig(t))
}

// tlsOverConfig is tlsOver with the gateway's TLS configuration conf.
func tlsOverConfig(t testing.TB, rawClient, rawGW net.Conn, conf *tls.Config) (client, gw net.Conn) {
	t.Helper()
	cc := tls.Client(rawClient, &tls.Config{InsecureSkipVerify: true, ServerName: "gateway.test"})
	sc := tls.Server(rawGW, conf)
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
