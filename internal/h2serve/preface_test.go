package h2serve

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

func TestMatchPreface(t *testing.T) {
	for _, tc := range []struct {
		in          string
		maybe, full bool
	}{
		{"", true, false},
		{"P", true, false},
		{"PRI * HTTP/2.0\r\n", true, false},
		{Preface, true, true},
		{Preface + "\x00\x00\x00\x04", true, true},
		{"GET / HTTP/1.1\r\n", false, false},
		{"PRI * HTTP/1.1\r\n", false, false},
		{"PUT", false, false},
		{"\x16\x03\x01", false, false}, // a TLS ClientHello
	} {
		maybe, full := matchPreface([]byte(tc.in))
		if maybe != tc.maybe || full != tc.full {
			t.Errorf("matchPreface(%q) = %v, %v; want %v, %v", tc.in, maybe, full, tc.maybe, tc.full)
		}
	}
}

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestSniff tells HTTP/2 from the rest by the first bytes, without waiting
// for bytes an HTTP/1.1 client does not send, and replays what it read.
func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		send    []string // written one after another
		closeW  bool     // the client ends its side after sending
		h2      bool
		replay  string // what the returned conn reads first
		wantErr bool
	}{
		{name: "preface", send: []string{Preface + "\x00\x00\x00\x04\x00"}, h2: true, replay: "\x00\x00\x00\x04\x00"},
		{name: "preface in pieces", send: []string{"PRI * HT", "TP/2.0\r\n\r\nSM\r\n\r\n"}, h2: true},
		{name: "short HTTP/1.1", send: []string{"GET / HTTP/1.1\r\n\r\n"}, replay: "GET / HTTP/1.1\r\n\r\n"},
		{name: "tiny request", send: []string{"G"}, replay: "G"},
		{name: "part of the preface, then silence", send: []string{"PRI * "}, replay: "PRI * "},
		{name: "part of the preface, then EOF", send: []string{"PRI"}, closeW: true, replay: "PRI"},
		{name: "nothing, then EOF", closeW: true, wantErr: true},
		{name: "nothing, then silence", replay: ""},
		{name: "request line in pieces", send: []string{"GET /a", " HTTP/1.0\r\nHost: a\r\n\r\n"}, replay: "GET /a HTTP/1.0\r\nHost: a\r\n\r\n"},
		{name: "half a request line, then silence", send: []string{"GET /a"}, replay: "GET /a"},
		// h2spec's invalid preface (3.5, case 2): neither protocol.
		{name: "invalid preface", send: []string{"INVALID CONNECTION PREFACE\r\n\r\n"}, wantErr: true},
		{name: "not HTTP/1.x", send: []string{"GET / HTTP/2.0\r\n\r\n"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := pair(t)
			go func() {
				for _, s := range tc.send {
					_, _ = io.WriteString(client, s)
					time.Sleep(10 * time.Millisecond)
				}
				if tc.closeW {
					_ = client.(*net.TCPConn).CloseWrite()
				}
			}()
			start := time.Now()
			h2, rest, err := Sniff(server, 300*time.Millisecond)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Sniff = %v, %v, nil; want an error", h2, rest)
				}
				return
			}
			if err != nil || h2 != tc.h2 {
				t.Fatalf("Sniff = %v, %v; want %v", h2, err, tc.h2)
			}
			if !tc.h2 && tc.replay == "GET / HTTP/1.1\r\n\r\n" && time.Since(start) > 200*time.Millisecond {
				t.Fatalf("an HTTP/1.1 request waited %v", time.Since(start))
			}
			if tc.replay == "" {
				return
			}
			_ = rest.SetReadDeadline(time.Now().Add(time.Second))
			got := make([]byte, len(tc.replay))
			if _, err := io.ReadFull(rest, got); err != nil || !bytes.Equal(got, []byte(tc.replay)) {
				t.Fatalf("read %q (%v), want %q", got, err, tc.replay)
			}
		})
	}
}
