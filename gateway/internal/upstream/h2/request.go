package h2

import (
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// Request is an extended CONNECT request for a WebSocket (RFC 8441
// section 4).
type Request struct {
	// Authority is :authority, the node's host[:port] as the client's
	// Host header named it.
	Authority string
	// Path is :path, the request target with its query.
	Path string
	// Header holds the request's fields: Origin, Sec-WebSocket-Protocol,
	// Sec-WebSocket-Extensions, Sec-WebSocket-Version, Cookie,
	// X-Forwarded-For, plugin headers. Names are sent in lowercase; the
	// fields HTTP/2 forbids (RFC 9113 section 8.2.2) and those of the
	// HTTP/1.1 upgrade that extended CONNECT replaces (Sec-WebSocket-Key
	// and Sec-WebSocket-Accept, RFC 8441 section 5) are left out, as are
	// Host (it is :authority) and pseudo-header names.
	Header http.Header
	// NeverIndexed names (lowercase) the fields a client that came over
	// HTTP/2 sent as never-indexed literals (RFC 7541 section 6.2.3):
	// they keep the flag toward the node (section 7.1.3), ":path"
	// included. Nil for a client over HTTP/1.1. See sensitiveField for
	// the fields that are never indexed whoever sent them.
	NeverIndexed map[string]bool
}

// Response is the node's answer to an extended CONNECT.
type Response struct {
	// Status is the response's :status: 2xx opened the WebSocket.
	Status int
	// Header holds the response's fields with canonical names, such as
	// the Sec-WebSocket-Protocol and Sec-WebSocket-Extensions the node
	// chose.
	Header http.Header
	// Body is the start (at most Config.MaxBody bytes) of a non-2xx
	// response's body; nil for 2xx.
	Body []byte
}

// skipRequestField reports whether a request field (lowercase name) is
// not sent.
func skipRequestField(name string) bool {
	switch name {
	case "connection", "upgrade", "keep-alive", "proxy-connection", "transfer-encoding", "te", "http2-settings":
		// Connection-specific fields (RFC 9113 section 8.2.2); "te" may
		// only carry "trailers", which a WebSocket has no use for.
		return true
	case "sec-websocket-key", "sec-websocket-accept":
		// Extended CONNECT has no key and no accept (RFC 8441 section 5).
		return true
	case "host", "content-length":
		// Host is :authority (RFC 9113 section 8.3.1); a CONNECT stream
		// has no length.
		return true
	}
	return name == "" || name[0] == ':'
}

// encodeRequest writes req's header block: pseudo-header fields first
// (RFC 9113 section 8.3), then the request's fields; scheme is :scheme
// (see schemeOf).
func encodeRequest(enc *hpack.Encoder, req *Request, scheme string) {
	enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	enc.WriteField(hpack.HeaderField{Name: ":protocol", Value: "websocket"})
	enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: scheme})
	enc.WriteField(hpack.HeaderField{Name: ":authority", Value: req.Authority})
	enc.WriteField(hpack.HeaderField{Name: ":path", Value: req.Path, Sensitive: req.NeverIndexed[":path"] || strings.IndexByte(req.Path, '?') >= 0})
	listed := connectionListed(req.Header)
	for name, values := range req.Header {
		lower := strings.ToLower(name)
		if skipRequestField(lower) || listed[lower] {
			continue
		}
		sensitive := sensitiveField(lower) || req.NeverIndexed[lower]
		for _, v := range values {
			// Cookies stay one field per value.
			enc.WriteField(hpack.HeaderField{Name: lower, Value: v, Sensitive: sensitive})
		}
	}
}

// sensitiveField reports whether a request field (lowercase name) is
// sent as a never-indexed literal (RFC 7541 section 7.1.3) whoever the
// client is: the encoder's dynamic table is shared by every client whose
// stream the connection carries, and a value in it can be guessed by
// another client whose own fields go through it (a CRIME-style probe of
// the compressed sizes), so a credential never enters it. These carry
// credentials: Authorization and Proxy-Authorization, Cookie (every
// value, however long), and Sec-WebSocket-Protocol, where browsers'
// WebSocket API puts tokens for want of a header of their own. A :path
// with a query (tokens in "?access_token=") is never indexed either (see
// encodeRequest).
func sensitiveField(name string) bool {
	switch name {
	case "authorization", "proxy-authorization", "cookie", "sec-websocket-protocol":
		return true
	}
	return false
}

// headerListSize is the size of req's header list as SETTINGS_MAX_HEADER_LIST_SIZE
// counts it (RFC 9113 section 6.5.2): each field's name and value
// lengths plus 32, pseudo-header fields included, for the fields
// encodeRequest sends with :scheme scheme.
func headerListSize(req *Request, scheme string) uint64 {
	n := uint64(len(":method")+len("CONNECT")+len(":protocol")+len("websocket")+len(":scheme")+len(scheme)+
		len(":authority")+len(req.Authority)+len(":path")+len(req.Path)) + 5*32
	listed := connectionListed(req.Header)
	for name, values := range req.Header {
		lower := strings.ToLower(name)
		if skipRequestField(lower) || listed[lower] {
			continue
		}
		for _, v := range values {
			n += uint64(len(name)+len(v)) + 32
		}
	}
	return n
}

// schemeOf is the :scheme of requests on the connection nc: "https" on
// a TLS connection, "http" on a cleartext one (RFC 8441 section 4, RFC
// 9113 section 8.3.1: the scheme of the target URI, which a WebSocket
// over TLS writes wss, RFC 6455 section 3).
func schemeOf(nc net.Conn) string {
	if _, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return "https"
	}
	return "http"
}

// connectionListed is the set of field names (lowercase) the request's
// Connection fields list: connection-specific too, and never sent (RFC
// 9113 section 8.2.2, RFC 9110 section 7.6.1). Nil when there is none.
func connectionListed(h http.Header) map[string]bool {
	var listed map[string]bool
	for name, values := range h {
		if !strings.EqualFold(name, "connection") {
			continue
		}
		for _, v := range values {
			for _, tok := range strings.Split(v, ",") {
				if tok = strings.ToLower(strings.TrimSpace(tok)); tok != "" {
					if listed == nil {
						listed = map[string]bool{}
					}
					listed[tok] = true
				}
			}
		}
	}
	return listed
}

// fieldsToHeader copies a response's regular fields.
func fieldsToHeader(fields []hpack.HeaderField) http.Header {
	h := make(http.Header, len(fields))
	for _, f := range fields {
		k := http.CanonicalHeaderKey(f.Name)
		h[k] = append(h[k], f.Value)
	}
	return h
}

// parseStatus parses a three-digit :status.
func parseStatus(s string) (int, bool) {
	if len(s) != 3 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 100
}
