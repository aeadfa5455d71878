package route

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// HashKey says where a hash pool finds a request's key (pools.hash_key),
// parsed once when the routes are compiled. The zero value finds none.
type HashKey struct {
	kind    hashKeyKind
	name    string // query parameter or header name
	segment int    // path segment, from 1
}

type hashKeyKind uint8

const (
	keyNone hashKeyKind = iota
	keyPath
	keyQuery
	keyHeader
)

// ParseHashKey parses a validated hash_key: "path:N", "query:NAME" or
// "header:NAME"; anything else (the empty string) finds no key.
func ParseHashKey(s string) HashKey {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "path":
		if n, err := strconv.Atoi(arg); err == nil && n >= 1 {
			return HashKey{kind: keyPath, segment: n}
		}
	case "query":
		return HashKey{kind: keyQuery, name: arg}
	case "header":
		return HashKey{kind: keyHeader, name: arg}
	}
	return HashKey{}
}

// Of returns the request's key: the path segment (of the path routes
// match), the query parameter's value or the header's value, or nil when
// the request has none. The slice points into ctx's request: it is only
// good until the handler returns.
func (k HashKey) Of(ctx *fasthttp.RequestCtx) []byte {
	switch k.kind {
	case keyPath:
		return pathSegment(ctx.Path(), k.segment)
	case keyQuery:
		return ctx.QueryArgs().Peek(k.name)
	case keyHeader:
		return ctx.Request.Header.Peek(k.name)
	}
	return nil
}

// pathSegment returns the n-th segment (from 1) of path: in "/room/abc",
// segment 1 is "room" and 2 is "abc". It returns nil past the last one.
func pathSegment(path []byte, n int) []byte {
	rest := bytes.TrimPrefix(path, []byte("/"))
	for i := 1; ; i++ {
		seg, after, more := bytes.Cut(rest, []byte("/"))
		if i == n {
			return seg
		}
		if !more {
			return nil
		}
		rest = after
	}
}
