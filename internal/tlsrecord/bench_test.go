package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testca"
)

// benchSizes are a small WebSocket frame and a full record.
var benchSizes = []int{128, MaxPlaintext}

// BenchmarkSeal is this package's sealing of one record of application
// data into a reused buffer, per suite.
func BenchmarkSeal(b *testing.B) {
	for id, name := range suiteNames {
		for _, size := range benchSizes {
			b.Run(name+"/"+strconv.Itoa(size), func(b *testing.B) {
				_, client := pair(b, id)
				p := make([]byte, size)
				buf := make([]byte, 0, SealedLen(size))
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := client.Seal(buf[:0], p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkOpen is this package's opening of records into a reused
// buffer, per suite: batches of 64 records sealed once, opened again
// with the read sequence number set back (the one hook).
func BenchmarkOpen(b *testing.B) {
	for id, name := range suiteNames {
		for _, size := range benchSizes {
			b.Run(name+"/"+strconv.Itoa(size), func(b *testing.B) {
				server, client := pair(b, id)
				var stream []byte
				for range 64 {
					stream, _ = client.Seal(stream, make([]byte, size))
				}
				plain := make([]byte, 0, len(stream)) // see Open
				b.SetBytes(64 * int64(size))
				b.ReportAllocs()
				for b.Loop() {
					server.in.seq = 0
					if _, err := server.Open(plain[:0], stream); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRoundTrip seals a record on one end and opens it on the
// other: BenchmarkCryptoTLS does the same with crypto/tls's conns, for
// the comparison.
func BenchmarkRoundTrip(b *testing.B) {
	for id, name := range suiteNames {
		for _, size := range benchSizes {
			b.Run(name+"/"+strconv.Itoa(size), func(b *testing.B) {
				server, client := pair(b, id)
				p := make([]byte, size)
				buf := make([]byte, 0, SealedLen(size))
				plain := make([]byte, 0, SealedLen(size))
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					rec, err := client.Seal(buf[:0], p)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := server.Open(plain[:0], rec); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRoundTripReleased is BenchmarkRoundTrip with both sessions
// released before each record, as the poller releases an idle client's:
// what making the AEAD states again costs a record.
func BenchmarkRoundTripReleased(b *testing.B) {
	for id, name := range suiteNames {
		b.Run(name+"/128", func(b *testing.B) {
			server, client := pair(b, id)
			p := make([]byte, 128)
			buf := make([]byte, 0, SealedLen(128))
			plain := make([]byte, 0, SealedLen(128))
			b.ReportAllocs()
			for b.Loop() {
				client.Release()
				server.Release()
				rec, err := client.Seal(buf[:0], p)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := server.Open(plain[:0], rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// memConn is one end of a connection that runs over a net.Pipe for the
// handshake and in memory after (mem): writes append to out, reads take
// from in, so that a benchmark measures crypto/tls's record layer and no
// I/O.
type memConn struct {
	net.Conn
	mem     bool
	in, out *bytes.Buffer
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.mem {
		return c.in.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *memConn) Write(p []byte) (int, error) {
	if c.mem {
		return c.out.Write(p)
	}
	return c.Conn.Write(p)
}

// BenchmarkCryptoTLS is crypto/tls's own record layer doing what
// BenchmarkRoundTrip does: a tls.Conn's Write of size bytes and the
// peer's Read of them, over memory. Go's client and server settle on
// TLS_AES_128_GCM_SHA256 on a machine with AES instructions (neither
// lets a program choose a TLS 1.3 suite), so that is the suite to
// compare with.
func BenchmarkCryptoTLS(b *testing.B) {
	ca, err := testca.New("bench")
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := ca.Server("localhost")
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			p1, p2 := net.Pipe()
			up, down := new(bytes.Buffer), new(bytes.Buffer)
			cc := &memConn{Conn: p1, in: down, out: up}
			sc := &memConn{Conn: p2, in: up, out: down}
			client := tls.Client(cc, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
			server := tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{leaf.TLS()}, SessionTicketsDisabled: true})
			done := make(chan error, 1)
			go func() { done <- server.Handshake() }()
			if err := client.Handshake(); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			p1.SetDeadline(time.Now()) // nothing more goes over the pipe
			cc.mem, sc.mem = true, true
			b.Logf("crypto/tls suite: %s", tls.CipherSuiteName(client.ConnectionState().CipherSuite))
			p := make([]byte, size)
			got := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Write(p); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(server, got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
