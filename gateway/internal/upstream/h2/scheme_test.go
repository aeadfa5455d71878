package h2

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// TestSchemeFollowsTLS checks the request's :scheme: "https" on a TLS
// connection, "http" on a cleartext one (RFC 8441 section 4, RFC 9113
// section 8.3.1), so that a node over TLS is not told its clients came
// in the clear.
func TestSchemeFollowsTLS(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	for _, tc := range []struct {
		name string
		nc   net.Conn
		want string
	}{
		{"cleartext", a, "http"},
		{"tls", tls.Client(a, &tls.Config{ServerName: "node.test"}), "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			encodeRequest(hpack.NewEncoder(&buf), &Request{Authority: "node.test", Path: "/ws"}, schemeOf(tc.nc))
			fields, err := hpack.NewDecoder(4096, nil).DecodeFull(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, f := range fields {
				if f.Name == ":scheme" {
					got = f.Value
				}
			}
			if got != tc.want {
				t.Errorf(":scheme %q, want %q", got, tc.want)
			}
		})
	}
}
