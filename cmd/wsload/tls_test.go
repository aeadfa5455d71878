package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/bench/loadgen"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// startTLSRelay serves an in-process relay behind TLS on a loopback port,
// offering h2 and http/1.1 as relay-backend -tls-cert does, and returns
// its address and the file of the CA that signed its certificate.
func startTLSRelay(t *testing.T) (addr, caFile string) {
	t.Helper()
	ca, err := testca.New("wsload test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLS()}, NextProtos: []string{"h2", "http/1.1"}}
	r := relay.New(relay.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go func() { _ = r.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return ln.Addr().String(), caFile
}

// otherCA writes the PEM of a CA that signed nothing the servers use.
func otherCA(t *testing.T) string {
	t.Helper()
	ca, err := testca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(f, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTransportFlags runs wsload over wss:// with -ca, -insecure, -tls 1.2
// and -h2, and over cleartext HTTP/2 with -h2: each run holds its
// connections and its report names the transport, the TLS version and
// ALPN, and (HTTP/2) the few connections that carried the WebSockets.
// With a CA that did not sign the server's certificate every handshake
// fails under failed_by.tls with the verifier's words, and the exit code
// is 1.
func TestTransportFlags(t *testing.T) {
	tlsAddr, caFile := startTLSRelay(t)
	plain := startRelay(t)
	wss := "wss://" + tlsAddr + "/room/r%d"
	tests := []struct {
		name      string
		args      []string
		code      int
		transport string
		tls       string // "1.3": every connection TLS 1.3
		alpn      string
		conns     int64
		stderr    string
	}{
		{"wss -ca", []string{"-url", wss, "-ca", caFile}, exitOK, "wss", "1.3", "http/1.1", 20, ""},
		{"wss -insecure -tls 1.2", []string{"-url", wss, "-insecure", "-tls", "1.2"}, exitOK, "wss", "1.2", "http/1.1", 20, ""},
		{"wss -h2", []string{"-url", wss, "-ca", caFile, "-h2", "-h2-streams", "8"}, exitOK, "wss+h2", "1.3", "h2", 3, ""},
		{"ws -h2", []string{"-url", "ws://" + plain + "/room/r%d", "-h2", "-h2-streams", "8"}, exitOK, "ws+h2c", "", "", 3, ""},
		{"wrong ca", []string{"-url", wss, "-ca", otherCA(t)}, exitFailed, "wss", "", "", 0, "certificate signed by unknown authority"},
		{"wrong ca -h2", []string{"-url", wss, "-ca", otherCA(t), "-h2"}, exitFailed, "wss+h2", "", "", 0, "certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"idle", "-n", "20", "-hold", "300ms", "-json"}, tt.args...)
			out, errs, code := wsload(t, args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
			var r loadgen.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("no report: %v\n%s", err, out)
			}
			if r.Transport != tt.transport || r.Conns != tt.conns {
				t.Errorf("transport %q over %d connections, want %q over %d", r.Transport, r.Conns, tt.transport, tt.conns)
			}
			if tt.tls != "" && (r.TLS[tt.tls] != tt.conns || r.ALPN[tt.alpn] != tt.conns || r.Held != 20) {
				t.Errorf("tls %v alpn %v held %d", r.TLS, r.ALPN, r.Held)
			}
			if !strings.Contains(errs, "transport") {
				t.Errorf("the table has no transport line:\n%s", errs)
			}
			if tt.stderr != "" && (!strings.Contains(errs, tt.stderr) || r.FailedBy[loadgen.ReasonTLS] != 20) {
				t.Errorf("failed by %v; stderr lacks %q:\n%s", r.FailedBy, tt.stderr, errs)
			}
		})
	}
}

// TestTransportFlagsRefused: flags that do not go together are a usage
// error (exit 2) that names them.
func TestTransportFlagsRefused(t *testing.T) {
	caFile := otherCA(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-url", "ws://127.0.0.1:1/r", "-ca", caFile}, "-ca goes with a wss:// URL"},
		{[]string{"-url", "ws://127.0.0.1:1/r", "-insecure"}, "-insecure goes with a wss:// URL"},
		{[]string{"-url", "wss://127.0.0.1:1/r", "-h2-streams", "5"}, "-h2-streams goes with -h2"},
		{[]string{"-url", "wss://127.0.0.1:1/r", "-h2", "-h2-streams", "0"}, "-h2-streams must be"},
		{[]string{"-url", "wss://127.0.0.1:1/r", "-tls", "1.1"}, "-tls must be 1.2 or 1.3"},
		{[]string{"-url", "wss://127.0.0.1:1/r", "-ca", filepath.Join(t.TempDir(), "missing.pem")}, "-ca"},
		{[]string{"-url", "wss://127.0.0.1:1/r", "-ca", caFile, "-insecure"}, "-insecure"},
		{[]string{"-url", "http://127.0.0.1:1/r"}, "scheme must be ws or wss"},
	}
	for _, tt := range tests {
		_, errs, code := wsload(t, append([]string{"idle"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", tt.args, code, errs, exitUsage, tt.want)
		}
	}
}

// TestThroughWsgateProcess runs wsload against a wsgate process whose TLS
// listener speaks HTTP/2 too (h2 = true) with at most 8 streams a
// connection: idle over -h2 keeps to the gateway's limit (40 WebSockets,
// 5 connections though -h2-streams is 100), and fanout delivers every
// message over wss:// and over -h2.
func TestThroughWsgateProcess(t *testing.T) {
	relayAddr := startRelay(t)
	ca, err := testca.New("wsload test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := leaf.WriteFiles(dir, "gw")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	tlsAddr := testproc.FreeAddr(t)
	cfg := filepath.Join(dir, "wsgate.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `[gateway]
listen = %q
  [gateway.tls]
  listen = %q
  h2 = true
  h2_max_streams = 8
  [[gateway.tls.certificates]]
  cert_file = %q
  key_file = %q
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %q
[[routes]]
pool = "relay"
`, testproc.FreeAddr(t), tlsAddr, certFile, keyFile, relayAddr), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg, "-watch=false")
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", tlsAddr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wsgate's TLS listener did not open within 30s:\n%s", gw.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	url := "wss://" + tlsAddr + "/room/r%d"
	report := func(t *testing.T, args ...string) loadgen.Report {
		t.Helper()
		out, errs, code := wsload(t, append(args, "-url", url, "-ca", caFile, "-json")...)
		if code != exitOK {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
		}
		var r loadgen.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("no report: %v\n%s", err, out)
		}
		return r
	}
	t.Run("idle -h2", func(t *testing.T) {
		r := report(t, "idle", "-n", "40", "-hold", "500ms", "-h2")
		if r.Held != 40 || r.Conns != 5 || r.Transport != "wss+h2" || r.TLS["1.3"] != 5 || r.ALPN["h2"] != 5 {
			t.Fatalf("held %d over %d connections, transport %q, tls %v, alpn %v", r.Held, r.Conns, r.Transport, r.TLS, r.ALPN)
		}
	})
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("fanout h2=%v", h2), func(t *testing.T) {
			args := []string{"fanout", "-rooms", "2", "-members", "3", "-rate", "10", "-duration", "1s", "-settle", "1s"}
			if h2 {
				args = append(args, "-h2")
			}
			r := report(t, args...)
			if r.Sent == 0 || r.Delivered != 100 || r.Failed != 0 || r.Dropped != 0 {
				t.Fatalf("sent %d delivered %v failed %v dropped %v", r.Sent, r.Delivered, r.FailedBy, r.DroppedBy)
			}
		})
	}
}
