// Package proxyproto parses the PROXY protocol header, versions 1 (text)
// and 2 (binary), that a load balancer sends at the start of a TCP
// connection to pass on the client's address (see the HAProxy
// specification, "The PROXY protocol", versions 1 and 2). It only parses:
// reading from a socket, deadlines and who may send a header are the
// caller's concern.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// MaxV1 is the longest version 1 header, "\r\n" included (the spec's 107).
const MaxV1 = 107

// MaxHeader is the longest header Parse accepts: a version 2 header may
// carry up to 64 KiB of TLVs, but the ones load balancers send (AWS, GCP,
// Azure) are a few dozen bytes, so anything longer is refused rather than
// buffered.
const MaxHeader = 1024

// v2Sig is the 12-byte signature that starts a version 2 header.
var v2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// v1Prefix starts a version 1 header.
var v1Prefix = []byte("PROXY ")

// ErrShort means b holds the start of what may be a valid header but not
// all of it: read more and call Parse again.
var ErrShort = errors.New("proxyproto: header incomplete")

// ErrInvalid is wrapped by every error about a malformed header.
var ErrInvalid = errors.New("proxyproto: invalid header")

// Header is one parsed PROXY header.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Local is true when the header carries no client address: a version
	// 1 "UNKNOWN" or a version 2 LOCAL command (the balancer's own health
	// check), or a version 2 PROXY command for an address family other
	// than TCP or UDP over IPv4 or IPv6. The connection's own addresses
	// then stand.
	Local bool
	// Source and Dest are the client's address and the address it
	// connected to; zero when Local.
	Source, Dest netip.AddrPort
}

// Parse reads a header from the start of b. It returns the header and its
// length in bytes (what follows belongs to the connection's own
// protocol), ErrShort when b is a prefix of a header that may still be
// valid, or an error wrapping ErrInvalid. It never reads past MaxHeader
// bytes: a longer header is invalid.
func Parse(b []byte) (Header, int, error) {
	switch {
	case len(b) == 0:
		return Header{}, 0, ErrShort
	case b[0] == v1Prefix[0]:
		if !hasPrefix(b, v1Prefix) {
			return Header{}, 0, invalid("neither a version 1 nor a version 2 signature")
		}
		return parseV1(b)
	case b[0] == v2Sig[0]:
		if !hasPrefix(b, v2Sig) {
			return Header{}, 0, invalid("neither a version 1 nor a version 2 signature")
		}
		return parseV2(b)
	}
	return Header{}, 0, invalid("neither a version 1 nor a version 2 signature")
}

// hasPrefix reports whether b starts with p, or, shorter than p, could.
func hasPrefix(b, p []byte) bool {
	n := min(len(b), len(p))
	return bytes.Equal(b[:n], p[:n])
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// parseV1 parses "PROXY TCP4|TCP6|UNKNOWN ...\r\n".
func parseV1(b []byte) (Header, int, error) {
	end := bytes.IndexByte(b[:min(len(b), MaxV1)], '\n')
	if end < 0 {
		if len(b) >= MaxV1 {
			return Header{}, 0, invalid("version 1 header longer than %d bytes", MaxV1)
		}
		return Header{}, 0, ErrShort
	}
	if end == 0 || b[end-1] != '\r' {
		return Header{}, 0, invalid("version 1 header not ended by CRLF")
	}
	line := string(b[len(v1Prefix) : end-1])
	h := Header{Version: 1}
	fields := splitSpaces(line)
	if len(fields) == 0 {
		return Header{}, 0, invalid("version 1 header without a protocol")
	}
	switch fields[0] {
	case "UNKNOWN":
		// The rest of the line is to be ignored (spec section 2.1).
		h.Local = true
		return h, end + 1, nil
	case "TCP4", "TCP6":
	default:
		return Header{}, 0, invalid("version 1 protocol %q (want TCP4, TCP6 or UNKNOWN)", fields[0])
	}
	if len(fields) != 5 {
		return Header{}, 0, invalid("version 1 header has %d fields, want 6", len(fields)+1)
	}
	v4 := fields[0] == "TCP4"
	src, err := v1Addr(fields[1], v4)
	if err != nil {
		return Header{}, 0, err
	}
	dst, err := v1Addr(fields[2], v4)
	if err != nil {
		return Header{}, 0, err
	}
	sp, err := v1Port(fields[3])
	if err != nil {
		return Header{}, 0, err
	}
	dp, err := v1Port(fields[4])
	if err != nil {
		return Header{}, 0, err
	}
	h.Source, h.Dest = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, end + 1, nil
}

// splitSpaces splits s at single spaces; two spaces in a row, or a
// leading or trailing one, give an empty field, which the callers refuse.
func splitSpaces(s string) []string {
	var out []string
	for {
		i := 0
		for i < len(s) && s[i] != ' ' {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			return out
		}
		s = s[i+1:]
	}
}

func v1Addr(s string, v4 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4() != v4 {
		fam := "TCP6"
		if v4 {
			fam = "TCP4"
		}
		return netip.Addr{}, invalid("version 1 address %q is not a %s address", s, fam)
	}
	return a, nil
}

func v1Port(s string) (uint16, error) {
	// Decimal, no sign, no leading zero (the spec: "without any leading
	// zeroes"), at most 65535.
	if s == "" || len(s) > 5 || (s[0] == '0' && len(s) > 1) || s[0] == '+' || s[0] == '-' {
		return 0, invalid("version 1 port %q", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, invalid("version 1 port %q", s)
	}
	return uint16(n), nil
}

// parseV2 parses the binary header: signature, version and command,
// family and protocol, length, addresses, TLVs (skipped).
func parseV2(b []byte) (Header, int, error) {
	if len(b) < 16 {
		return Header{}, 0, ErrShort
	}
	if b[12]>>4 != 2 {
		return Header{}, 0, invalid("version 2 signature with version %d", b[12]>>4)
	}
	cmd := b[12] & 0x0f
	if cmd > 1 {
		return Header{}, 0, invalid("version 2 command %d (want LOCAL or PROXY)", cmd)
	}
	n := 16 + int(binary.BigEndian.Uint16(b[14:16]))
	if n > MaxHeader {
		return Header{}, 0, invalid("version 2 header of %d bytes, more than %d", n, MaxHeader)
	}
	if len(b) < n {
		return Header{}, 0, ErrShort
	}
	h := Header{Version: 2, Local: true}
	body := b[16:n]
	fam, proto := b[13]>>4, b[13]&0x0f
	if proto > 2 {
		return Header{}, 0, invalid("version 2 transport protocol %d", proto)
	}
	if fam > 3 {
		return Header{}, 0, invalid("version 2 address family %d", fam)
	}
	if cmd == 0 || proto == 0 {
		// LOCAL, or PROXY over an unspecified transport: the addresses,
		// if any, are to be ignored.
		return h, n, nil
	}
	var alen, ipv int // bytes of one address, IP version
	switch fam {
	case 1: // AF_INET
		alen, ipv = 4, 4
	case 2: // AF_INET6
		alen, ipv = 16, 6
	default: // AF_UNSPEC and AF_UNIX carry no IP address: Local stays true.
		return h, n, nil
	}
	if len(body) < 2*alen+4 {
		return Header{}, 0, invalid("version 2 IPv%d header with %d address bytes, want %d", ipv, len(body), 2*alen+4)
	}
	src, _ := netip.AddrFromSlice(body[:alen])
	dst, _ := netip.AddrFromSlice(body[alen : 2*alen])
	ports := body[2*alen:]
	h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(ports[0:2]))
	h.Dest = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(ports[2:4]))
	h.Local = false
	return h, n, nil
}

// AppendV2 appends a version 2 PROXY header for a TCP connection from src
// to dst; both must be of the same family (IPv4, or IPv6), else it
// appends a LOCAL header.
func AppendV2(b []byte, src, dst netip.AddrPort) []byte {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	var famLen []byte // family and protocol, address length
	switch {
	case s.Is4() && d.Is4():
		famLen = []byte{0x11, 0, 12}
	case s.Is6() && d.Is6():
		famLen = []byte{0x21, 0, 36}
	default:
		return AppendLocalV2(b)
	}
	b = append(b, v2Sig...)
	b = append(b, 0x21)
	b = append(b, famLen...)
	b = append(b, s.AsSlice()...)
	b = append(b, d.AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

// AppendLocalV2 appends a version 2 LOCAL header: a connection the sender
// makes for itself (a health check), carrying no client address.
func AppendLocalV2(b []byte) []byte {
	b = append(b, v2Sig...)
	return append(b, 0x20, 0x00, 0, 0)
}
