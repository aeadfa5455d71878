package proxyproto

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func v2(cmd, famProto byte, body []byte) []byte {
	b := append([]byte(nil), v2Sig...)
	b = append(b, 0x20|cmd, famProto, byte(len(body)>>8), byte(len(body)))
	return append(b, body...)
}

func TestParse(t *testing.T) {
	ap := netip.MustParseAddrPort
	v4body := []byte{192, 0, 2, 1, 198, 51, 100, 7, 0x30, 0x39, 0x01, 0xbb}
	v6body := append(append(netip.MustParseAddr("2001:db8::1").AsSlice(), netip.MustParseAddr("2001:db8::2").AsSlice()...), 0x30, 0x39, 0x01, 0xbb)
	withTLV := append(append([]byte(nil), v4body...), 0x01, 0x00, 0x02, 'h', '2')
	tests := []struct {
		name string
		in   string
		want Header
		n    int    // header length; 0 with an error
		err  string // "" ok, "short", else a substring of the error
	}{
		{"v1 tcp4", "PROXY TCP4 192.0.2.1 198.51.100.7 12345 443\r\nGET /", Header{Version: 1, Source: ap("192.0.2.1:12345"), Dest: ap("198.51.100.7:443")}, 45, ""},
		{"v1 tcp6", "PROXY TCP6 2001:db8::1 2001:db8::2 12345 443\r\n", Header{Version: 1, Source: ap("[2001:db8::1]:12345"), Dest: ap("[2001:db8::2]:443")}, 46, ""},
		{"v1 unknown", "PROXY UNKNOWN\r\n", Header{Version: 1, Local: true}, 15, ""},
		{"v1 unknown with addresses", "PROXY UNKNOWN ffff:: ffff:: 1 2\r\nx", Header{Version: 1, Local: true}, 33, ""},
		{"v1 port 0 and 65535", "PROXY TCP4 1.2.3.4 5.6.7.8 0 65535\r\n", Header{Version: 1, Source: ap("1.2.3.4:0"), Dest: ap("5.6.7.8:65535")}, 36, ""},
		{"v1 prefix", "PROXY TCP4 1.2", Header{}, 0, "short"},
		{"v1 signature prefix", "PRO", Header{}, 0, "short"},
		{"empty", "", Header{}, 0, "short"},
		{"v1 no CR", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", Header{}, 0, "CRLF"},
		{"v1 too long", "PROXY TCP6 " + strings.Repeat("1", 100), Header{}, 0, "longer than"},
		{"v1 bad protocol", "PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", Header{}, 0, "protocol"},
		{"v1 family mismatch", "PROXY TCP4 2001:db8::1 5.6.7.8 1 2\r\n", Header{}, 0, "not a TCP4"},
		{"v1 v4 in TCP6", "PROXY TCP6 1.2.3.4 2001:db8::1 1 2\r\n", Header{}, 0, "not a TCP6"},
		{"v1 zone", "PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n", Header{}, 0, "not a TCP6"},
		{"v1 leading zero port", "PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", Header{}, 0, "port"},
		{"v1 port too big", "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", Header{}, 0, "port"},
		{"v1 signed port", "PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", Header{}, 0, "port"},
		{"v1 double space", "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", Header{}, 0, "fields"},
		{"v1 missing port", "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", Header{}, 0, "fields"},
		{"v1 empty", "PROXY \r\n", Header{}, 0, "protocol"},
		{"http", "GET / HTTP/1.1\r\n", Header{}, 0, "signature"},
		{"lowercase", "proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", Header{}, 0, "signature"},
		{"v2 tcp4", string(v2(1, 0x11, v4body)) + "GET", Header{Version: 2, Source: ap("192.0.2.1:12345"), Dest: ap("198.51.100.7:443")}, 28, ""},
		{"v2 udp4", string(v2(1, 0x12, v4body)), Header{Version: 2, Source: ap("192.0.2.1:12345"), Dest: ap("198.51.100.7:443")}, 28, ""},
		{"v2 tcp6", string(v2(1, 0x21, v6body)), Header{Version: 2, Source: ap("[2001:db8::1]:12345"), Dest: ap("[2001:db8::2]:443")}, 52, ""},
		{"v2 tlvs skipped", string(v2(1, 0x11, withTLV)), Header{Version: 2, Source: ap("192.0.2.1:12345"), Dest: ap("198.51.100.7:443")}, 33, ""},
		{"v2 local", string(v2(0, 0x00, nil)), Header{Version: 2, Local: true}, 16, ""},
		{"v2 local with addresses", string(v2(0, 0x11, v4body)), Header{Version: 2, Local: true}, 28, ""},
		{"v2 unix", string(v2(1, 0x31, make([]byte, 216))), Header{Version: 2, Local: true}, 232, ""},
		{"v2 unspec", string(v2(1, 0x01, nil)), Header{Version: 2, Local: true}, 16, ""},
		{"v2 signature prefix", string(v2Sig[:7]), Header{}, 0, "short"},
		{"v2 fixed part short", string(v2(1, 0x11, v4body)[:15]), Header{}, 0, "short"},
		{"v2 body short", string(v2(1, 0x11, v4body)[:20]), Header{}, 0, "short"},
		{"v2 ipv4 body too small", string(v2(1, 0x11, v4body[:11])), Header{}, 0, "want 12"},
		{"v2 ipv6 body too small", string(v2(1, 0x21, v4body)), Header{}, 0, "want 36"},
		{"v2 version 1", string(append(append([]byte(nil), v2Sig...), 0x11, 0x11, 0, 0)), Header{}, 0, "version 1"},
		{"v2 command 2", string(v2(2, 0x11, v4body)), Header{}, 0, "command"},
		{"v2 family 4", string(v2(1, 0x41, v4body)), Header{}, 0, "family"},
		{"v2 protocol 3", string(v2(1, 0x13, v4body)), Header{}, 0, "transport"},
		{"v2 too long", string(v2(1, 0x11, make([]byte, MaxHeader))), Header{}, 0, "more than"},
		{"v2 bad signature", "\r\n\r\n\x00\r\nQUIT\r", Header{}, 0, "signature"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := Parse([]byte(tc.in))
			switch {
			case tc.err == "":
				if err != nil {
					t.Fatalf("err %v", err)
				}
			case tc.err == "short":
				if !errors.Is(err, ErrShort) {
					t.Fatalf("err %v, want ErrShort", err)
				}
				return
			default:
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want ErrInvalid with %q", err, tc.err)
				}
				return
			}
			if h != tc.want || n != tc.n {
				t.Fatalf("got %+v n=%d, want %+v n=%d", h, n, tc.want, tc.n)
			}
		})
	}
}

func TestAppendV2(t *testing.T) {
	for _, c := range []struct{ src, dst string }{
		{"192.0.2.1:1", "198.51.100.7:443"},
		{"[2001:db8::1]:65535", "[2001:db8::2]:80"},
		{"[::ffff:192.0.2.1]:9", "198.51.100.7:10"},
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		b := AppendV2(nil, src, dst)
		h, n, err := Parse(b)
		if err != nil || n != len(b) || h.Local || h.Source.Addr() != src.Addr().Unmap() || h.Source.Port() != src.Port() || h.Dest.Addr() != dst.Addr().Unmap() {
			t.Fatalf("%v: %+v n=%d len=%d err=%v", c, h, n, len(b), err)
		}
	}
	if h, n, err := Parse(AppendLocalV2([]byte("x"))[1:]); err != nil || !h.Local || h.Version != 2 || n != 16 {
		t.Fatalf("AppendLocalV2: %+v %d %v", h, n, err)
	}
	b := AppendV2(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("[2001:db8::2]:80"))
	if h, n, err := Parse(b); err != nil || !h.Local || n != 16 {
		t.Fatalf("mixed families: %+v %d %v", h, n, err)
	}
}

// FuzzParse checks that Parse never panics, never claims more bytes than it
// was given or than MaxHeader, agrees with itself on every prefix (a
// prefix of a valid header is ErrShort, never another answer), and reports
// only ErrShort or ErrInvalid.
func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 198.51.100.7 12345 443\r\nGET / HTTP/1.1\r\n"))
	f.Add([]byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(AppendV2(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("198.51.100.7:443")))
	f.Add(AppendV2(nil, netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[2001:db8::2]:443")))
	f.Add(v2(0, 0, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is neither ErrShort nor ErrInvalid", err)
			}
			if errors.Is(err, ErrShort) && len(b) >= MaxHeader {
				t.Fatalf("ErrShort with %d bytes", len(b))
			}
			return
		}
		if n <= 0 || n > len(b) || n > MaxHeader {
			t.Fatalf("n=%d for %d bytes", n, len(b))
		}
		if h.Version != 1 && h.Version != 2 {
			t.Fatalf("version %d", h.Version)
		}
		if !h.Local && (!h.Source.Addr().IsValid() || !h.Dest.Addr().IsValid()) {
			t.Fatalf("not local without addresses: %+v", h)
		}
		// The same header with anything after it parses the same.
		h2, n2, err := Parse(append(append([]byte(nil), b[:n]...), "trailing"...))
		if err != nil || h2 != h || n2 != n {
			t.Fatalf("with trailing bytes: %+v %d %v, want %+v %d", h2, n2, err, h, n)
		}
		for i := range n {
			if _, _, err := Parse(b[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix of %d bytes of a valid %d-byte header: %v", i, n, err)
			}
		}
		if bytes.Equal(b[:min(len(b), 6)], v1Prefix) && n > MaxV1 {
			t.Fatalf("version 1 header of %d bytes", n)
		}
	})
}
