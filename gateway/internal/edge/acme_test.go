package edge

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testca"
)

// challengeOnly is a Managed that answers a tls-alpn-01 validation with
// cert, as one with a challenge pending does, and has nothing else.
type challengeOnly struct{ cert *tls.Certificate }

func (m challengeOnly) Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if !isACMEChallenge(hello) {
		return nil, errors.New("no certificate")
	}
	return m.cert, nil
}

// TestACMEValidationConnEndsAfterHandshake pins the TLS listener's
// connections whose handshake negotiated "acme-tls/1" (an ACME CA's
// tls-alpn-01 validation, which is not asked for a client certificate):
// such a connection was handed to the server as any other, so a request
// sent over it was read and answered. Now its first Read completes the
// handshake and ends the connection; the client reads the end, never an
// answer. An ordinary client's connection is read as before.
func TestACMEValidationConnEndsAfterHandshake(t *testing.T) {
	ca, err := testca.New("edge test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("a.test")
	if err != nil {
		t.Fatal(err)
	}
	cert := leaf.TLS()
	st := NewCertificates(slog.New(slog.DiscardHandler))
	st.SetManaged(challengeOnly{&cert})
	st.Swap(&CertSet{config: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: alpnHTTP11}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, nil, newCounts(), slog.New(slog.DiscardHandler), nil, func() int { return 1 }).
		WithTLS(st.Config(), func() time.Duration { return 10 * time.Second })
	defer l.Close()

	for _, tc := range []struct {
		name   string
		protos []string
		served bool
	}{
		{"validation", []string{"acme-tls/1"}, false},
		{"ordinary client", []string{"http/1.1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				got []byte
				err error
			}
			read := make(chan result, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					read <- result{nil, err}
					return
				}
				defer c.Close()
				b := make([]byte, 64)
				n, err := c.Read(b)
				if err == nil {
					_, err = c.Write([]byte("answer"))
				}
				read <- result{b[:n], err}
			}()
			c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "a.test", NextProtos: tc.protos, RootCAs: ca.Pool()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.ConnectionState().NegotiatedProtocol; got != tc.protos[0] {
				t.Fatalf("negotiated %q, want %q", got, tc.protos[0])
			}
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil && tc.served {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			answer, readErr := io.ReadAll(c)
			r := <-read
			if tc.served {
				if r.err != nil || len(r.got) == 0 || string(answer) != "answer" {
					t.Errorf("server read %q, %v; client read %q; want the request read and answered", r.got, r.err, answer)
				}
				return
			}
			if !errors.Is(r.err, io.EOF) || len(r.got) != 0 {
				t.Errorf("server read %q, %v; want io.EOF and nothing read", r.got, r.err)
			}
			var ne net.Error
			if len(answer) != 0 || (errors.As(readErr, &ne) && ne.Timeout()) {
				t.Errorf("client read %q, %v; want the connection ended with no answer", answer, readErr)
			}
		})
	}
}

// anyName is a Managed with a certificate for every hello, as ACME with
// domains has for a client sending no name (its first domain's).
type anyName struct{ cert *tls.Certificate }

func (m anyName) Certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) { return m.cert, nil }

// TestNoServerNameGetsDefaultFile pins "the first file stays the default
// for a client sending no name" (docs/config.md) beside ACME: such a
// client got ACME's certificate. A name no file covers still goes to
// ACME, and without a file a client sending no name does too.
func TestNoServerNameGetsDefaultFile(t *testing.T) {
	file, acme := &tls.Certificate{}, &tls.Certificate{}
	set := &CertSet{def: file, exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}, managed: anyName{acme}}
	for _, tc := range []struct {
		name string
		def  *tls.Certificate
		want *tls.Certificate
	}{
		{"", file, file},
		{"ws.example.com", file, acme},
		{"", nil, acme},
	} {
		set.def = tc.def
		got, err := set.certificate(&tls.ClientHelloInfo{ServerName: tc.name})
		if err != nil || got != tc.want {
			t.Errorf("server name %q, default file %t: got the %s certificate (%v), want the %s certificate",
				tc.name, tc.def != nil, which(got, file), err, which(tc.want, file))
		}
	}
}

func which(c, file *tls.Certificate) string {
	if c == file {
		return "file"
	}
	return "ACME"
}
