// Package httpheader compares HTTP header names and reads the
// comma-separated token lists of header values, as a proxy needs to: names
// without regard to case, hop-by-hop headers, Connection tokens. It works on
// the byte slices fasthttp hands out, without allocating.
package httpheader

import "bytes"

// HopByHop are the request headers that concern one connection only (RFC
// 9110 section 7.6.1, with Proxy-Connection and Proxy-Authorization, which
// are meant for a forward proxy), lowercase: never forwarded.
var HopByHop = [...]string{
	"connection", "proxy-connection", "keep-alive", "te", "transfer-encoding",
	"upgrade", "trailer", "proxy-authorization",
}

// IsHopByHop reports whether header k is one of HopByHop.
func IsHopByHop(k []byte) bool {
	for _, name := range HopByHop {
		if Is(k, name) {
			return true
		}
	}
	return false
}

// NextToken splits the first element off a comma-separated header value,
// without the whitespace around it.
func NextToken(v []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		tok, rest = v[:i], v[i+1:]
	} else {
		tok = v
	}
	return bytes.Trim(tok, " \t"), rest
}

// HasToken reports whether the comma-separated header value v lists tok,
// which must be lowercase, ignoring case.
func HasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v = NextToken(v)
		if Is(t, tok) {
			return true
		}
	}
	return false
}

// Is reports whether the header name k equals name, which must be
// lowercase ASCII, ignoring the case of k.
func Is(k []byte, name string) bool {
	return len(k) == len(name) && HasSuffixFold(k, name)
}

// Same reports whether header names k and name are one to a node:
// equal ignoring case, with "_" and " " taken for "-", since CGI, WSGI, PHP
// and Rack map X-User-Id, X_User_Id and "X User Id" alike to HTTP_X_USER_ID.
func Same(k []byte, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i := range len(k) {
		if foldHeaderByte(k[i]) != foldHeaderByte(name[i]) {
			return false
		}
	}
	return true
}

func foldHeaderByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_' || c == ' ':
		return '-'
	}
	return c
}

// HasSuffixFold reports whether s ends with the lowercase ASCII suffix,
// ignoring the case of s.
func HasSuffixFold(s []byte, suffix string) bool {
	off := len(s) - len(suffix)
	for i := 0; i < len(suffix); i++ {
		c := s[off+i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != suffix[i] {
			return false
		}
	}
	return true
}
