package h2serve

import (
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// Request is a request stream's header block.
type Request struct {
	// Method is :method, such as "CONNECT" or "GET".
	Method string
	// Protocol is :protocol, "websocket" for an extended CONNECT that
	// carries a WebSocket (RFC 8441 section 4); "" when absent.
	Protocol string
	// Scheme is :scheme ("" for a plain CONNECT).
	Scheme string
	// Authority is :authority, the host[:port] the client named.
	Authority string
	// Path is :path, the request target with its query ("" for a plain
	// CONNECT).
	Path string
	// Header holds the regular fields with canonical names.
	Header http.Header
	// ContentLength is the content-length field's value, -1 when there
	// is none. The DATA of the stream add up to it, or the stream is
	// reset (RFC 9113 section 8.1.1); Header holds it once, however
	// many times the client repeated it.
	ContentLength int64
	// NeverIndexed names (lowercase, pseudo-header fields included) the
	// fields the client sent as never-indexed literals (RFC 7541 section
	// 6.2.3), which an intermediary must forward as such (section
	// 7.1.3); nil when there is none.
	NeverIndexed map[string]bool
}

// parseRequest checks a request header block against RFC 9113 section 8.3
// and RFC 8441 section 4 and returns the request, or why it is malformed
// (a stream error of type PROTOCOL_ERROR, RFC 9113 section 8.1.1). The
// Framer has already checked field names (lowercase, valid), values,
// duplicated pseudo-header fields and their place before the regular ones.
func parseRequest(fields []hpack.HeaderField) (*Request, string) {
	req := &Request{Header: make(http.Header), ContentLength: -1}
	for _, f := range fields {
		if f.Sensitive {
			if req.NeverIndexed == nil {
				req.NeverIndexed = make(map[string]bool)
			}
			req.NeverIndexed[f.Name] = true
		}
		if strings.HasPrefix(f.Name, ":") {
			switch f.Name {
			case ":method":
				req.Method = f.Value
			case ":protocol":
				req.Protocol = f.Value
			case ":scheme":
				req.Scheme = f.Value
			case ":authority":
				req.Authority = f.Value
			case ":path":
				req.Path = f.Value
			default:
				return nil, "pseudo-header field " + f.Name + " in a request"
			}
			continue
		}
		switch f.Name {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			return nil, "connection-specific field " + f.Name + " (RFC 9113 section 8.2.2)"
		case "te":
			if f.Value != "trailers" {
				return nil, `te other than "trailers" (RFC 9113 section 8.2.2)`
			}
		}
		if f.Name == "content-length" {
			// Repeated (or a list), it must say one length (RFC 9110
			// section 8.6).
			for _, v := range strings.Split(f.Value, ",") {
				n, ok := parseLength(strings.TrimSpace(v))
				if !ok || req.ContentLength >= 0 && n != req.ContentLength {
					return nil, "content-length that is not one length (RFC 9110 section 8.6)"
				}
				req.ContentLength = n
			}
			req.Header["Content-Length"] = []string{strconv.FormatInt(req.ContentLength, 10)}
			continue
		}
		k := http.CanonicalHeaderKey(f.Name)
		req.Header[k] = append(req.Header[k], f.Value)
	}
	// Pseudo-header fields present but empty are malformed too.
	has := func(v string) bool { return v != "" }
	switch {
	case !has(req.Method):
		return nil, "no :method"
	case req.Method == http.MethodConnect && has(req.Protocol):
		// Extended CONNECT: all of them (RFC 8441 section 4).
		if !has(req.Scheme) || !has(req.Path) || !has(req.Authority) {
			return nil, "extended CONNECT without :scheme, :path or :authority (RFC 8441 section 4)"
		}
	case req.Method == http.MethodConnect:
		// Plain CONNECT (RFC 9113 section 8.5).
		if has(req.Scheme) || has(req.Path) || !has(req.Authority) {
			return nil, "CONNECT with :scheme or :path, or without :authority (RFC 9113 section 8.5)"
		}
	case has(req.Protocol):
		return nil, ":protocol in a request that is not CONNECT (RFC 8441 section 4)"
	default:
		if !has(req.Scheme) || !has(req.Path) {
			return nil, "no :scheme or :path (RFC 9113 section 8.3.1)"
		}
	}
	if has(req.Path) && req.Path[0] != '/' && !(req.Path == "*" && req.Method == http.MethodOptions) {
		return nil, ":path is not an absolute path (RFC 9113 section 8.3.1)"
	}
	return req, ""
}

// parseLength parses a content-length value: decimal digits (RFC 9110
// section 8.6), within int64.
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}
