package pluginhost

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/wsgate/wsgate/plugins/auth"
)

// partKind is one kind of request part a cache key can name.
type partKind uint8

const (
	partHeader partKind = iota + 1
	partQuery
	partRoute
	partHost
	partPath
	partClientIP
)

// namelessParts are the parts named without a ":NAME".
var namelessParts = map[string]partKind{"route": partRoute, "host": partHost, "path": partPath, "client_ip": partClientIP}

// keyPart is one parsed cache key part.
type keyPart struct {
	kind partKind
	name string // canonical header name or query parameter
}

// parseCacheKey parses the parts a plugin named (see auth.CacheKeyer).
func parseCacheKey(parts []string) ([]keyPart, error) {
	out := make([]keyPart, 0, len(parts))
	for _, p := range parts {
		kind, name, _ := strings.Cut(p, ":")
		switch kind {
		case "header":
			if name == "" {
				return nil, fmt.Errorf("cache key part %q: no header name", p)
			}
			out = append(out, keyPart{partHeader, http.CanonicalHeaderKey(name)})
		case "query":
			if name == "" {
				return nil, fmt.Errorf("cache key part %q: no parameter name", p)
			}
			out = append(out, keyPart{partQuery, name})
		case "route", "host", "path", "client_ip":
			if name != "" {
				return nil, fmt.Errorf("cache key part %q: %s takes no name", p, kind)
			}
			out = append(out, keyPart{kind: namelessParts[kind]})
		default:
			return nil, fmt.Errorf("cache key part %q: want header:NAME, query:NAME, route, host, path or client_ip", p)
		}
	}
	return out, nil
}

// keyScratch holds per-Authenticate state for computing cache keys: the
// parsed query, shared by every plugin of the chain.
type keyScratch struct {
	query  url.Values
	parsed bool
	buf    []byte
}

// sum hashes the values of parts in req. Each value is length-prefixed, and
// each part is tagged with its position and value count, so different
// requests never hash the same input.
func (ks *keyScratch) sum(parts []keyPart, req *auth.Request) [32]byte {
	b := ks.buf[:0]
	for i, p := range parts {
		var vals []string
		var one [1]string
		switch p.kind {
		case partHeader:
			vals = req.Header[p.name]
		case partQuery:
			if !ks.parsed {
				ks.query, _ = url.ParseQuery(req.RawQuery)
				ks.parsed = true
			}
			vals = ks.query[p.name]
		case partRoute:
			one[0], vals = req.Route, one[:]
		case partHost:
			one[0], vals = req.Host, one[:]
		case partPath:
			one[0], vals = req.Path, one[:]
		case partClientIP:
			ip := req.ClientAddr
			if h, _, err := net.SplitHostPort(ip); err == nil {
				ip = h
			}
			one[0], vals = ip, one[:]
		}
		b = binary.AppendUvarint(b, uint64(i))
		b = binary.AppendUvarint(b, uint64(len(vals)))
		for _, v := range vals {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	ks.buf = b
	return sha256.Sum256(b)
}
