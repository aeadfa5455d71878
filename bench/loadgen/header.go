package loadgen

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadHeader is returned by ParseHeader for a header that is not
// "Name: value", whose name is not an HTTP token or whose value holds a
// control character, or that wsload writes itself.
var ErrBadHeader = errors.New("loadgen: bad header")

// Header is one extra request header sent on every handshake, e.g. the
// token a route's auth plugin checks. It is a plain value.
type Header struct {
	Name, Value string
}

// ownHeaders are the request headers the handshake writes itself: a
// second copy would make the upgrade ambiguous or break it.
var ownHeaders = []string{"host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
	"sec-websocket-protocol", "sec-websocket-extensions", "content-length", "transfer-encoding"}

// ParseHeader parses "Name: value" (spaces around the value are dropped;
// the value may be empty).
func ParseHeader(s string) (Header, error) {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return Header{}, fmt.Errorf("%w %q: want 'Name: value'", ErrBadHeader, s)
	}
	if !isToken(name) {
		return Header{}, fmt.Errorf("%w %q: name %q is not an HTTP token", ErrBadHeader, s, name)
	}
	for _, own := range ownHeaders {
		if strings.EqualFold(name, own) {
			return Header{}, fmt.Errorf("%w %q: wsload writes %s itself", ErrBadHeader, s, name)
		}
	}
	value = strings.Trim(value, " \t")
	for i := range len(value) {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return Header{}, fmt.Errorf("%w %q: control character 0x%02x in the value", ErrBadHeader, s, c)
		}
	}
	return Header{Name: name, Value: value}, nil
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
