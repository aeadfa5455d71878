package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/wsgate/wsgate/plugins/auth"
)

type sourceKind uint8

const (
	sourceHeader sourceKind = iota + 1
	sourceQuery
	sourceSubprotocol
)

// source is one token_from entry.
type source struct {
	kind sourceKind
	name string // canonical header name or query parameter
}

// parseSource parses "header:NAME", "query:NAME" or "subprotocol".
func parseSource(s string) (source, error) {
	kind, name, _ := strings.Cut(s, ":")
	switch {
	case kind == "header" && name != "":
		return source{sourceHeader, http.CanonicalHeaderKey(name)}, nil
	case kind == "query" && name != "":
		return source{sourceQuery, name}, nil
	case s == "subprotocol":
		return source{kind: sourceSubprotocol}, nil
	}
	return source{}, fmt.Errorf("%q: want \"header:NAME\", \"query:NAME\" or \"subprotocol\"", s)
}

// cacheKey is the request part the source reads, in auth.CacheKeyer form.
func (s source) cacheKey() string {
	switch s.kind {
	case sourceHeader:
		return "header:" + s.name
	case sourceQuery:
		return "query:" + s.name
	default:
		return "header:Sec-Websocket-Protocol"
	}
}

// find returns the token the source holds in req, or "". q is the parsed
// query (needed for sourceQuery only).
func (s source) find(req *auth.Request, q map[string][]string) string {
	switch s.kind {
	case sourceHeader:
		v := strings.TrimSpace(req.Header.Get(s.name))
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		if s.name == "Authorization" {
			return "" // another scheme (Basic): not ours
		}
		return v
	case sourceQuery:
		if vs := q[s.name]; len(vs) > 0 {
			return vs[0]
		}
	case sourceSubprotocol:
		for _, line := range req.Header.Values("Sec-Websocket-Protocol") {
			for p := range strings.SplitSeq(line, ",") {
				if p = strings.TrimSpace(p); looksLikeJWT(p) {
					return p
				}
			}
		}
	}
	return ""
}

// looksLikeJWT reports whether p has the JWS compact form: three non-empty
// base64url segments separated by dots. That is how a token is told apart
// from the real subprotocols a client offers next to it.
func looksLikeJWT(p string) bool {
	segs := 0
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '.':
			if n == 0 {
				return false
			}
			segs++
			n = 0
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			n++
		default:
			return false
		}
	}
	return segs == 2 && n > 0
}
