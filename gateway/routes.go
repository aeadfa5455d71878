package gateway

import (
	"bytes"
	"strings"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
)

// route is a [[routes]] entry compiled for matching: lowercase host pattern,
// its pool resolved, limits converted once at load.
type route struct {
	name       string   // host and path prefix, as logs and plugins see it
	auth       []string // plugin chain
	host       string   // "" matches any host; "*.x.y" stored as ".x.y"
	wildcard   bool
	pathPrefix []byte
	pool       *upstream.Pool
	key        hashKey             // its pool's hash_key when a hash pool; none for the others
	origins    map[string]struct{} // nil: any origin
	overflow   string
	maxFrame   uint64
	// Keepalive pings and the client's rate caps (0 = off).
	pingInterval, pongTimeout time.Duration
	frameRate, byteRate       uint64
	plainHTTP                 bool     // plain requests are proxied; false: refused with 426
	strip                     []string // auth_headers, lowercase: removed from client input
}

// routeTable is an ordered list of routes; the first match wins.
type routeTable []*route

func compileRoutes(cfg *conf.Config, pools map[string]*upstream.Pool) routeTable {
	keys := map[string]hashKey{}
	for _, pc := range cfg.Pools {
		if pc.Balance == balancer.PolicyHash {
			keys[pc.Name] = parseHashKey(pc.HashKey)
		}
	}
	rt := make(routeTable, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		cr := &route{
			name:         r.Host + r.PathPrefix,
			auth:         r.Auth,
			pathPrefix:   []byte(r.PathPrefix),
			pool:         pools[r.Pool],
			key:          keys[r.Pool],
			overflow:     r.Overflow,
			maxFrame:     uint64(r.MaxFrame),
			pingInterval: r.PingInterval.Duration,
			pongTimeout:  r.PongTimeout.Duration,
			frameRate:    uint64(r.FrameRate),
			byteRate:     uint64(r.ByteRate),
			plainHTTP:    r.PlainHTTP != "refuse",
		}
		for _, h := range r.AuthHeaders {
			cr.strip = append(cr.strip, strings.ToLower(h))
		}
		switch h := strings.ToLower(r.Host); {
		case h == "*" || h == "":
		case strings.HasPrefix(h, "*."):
			cr.host, cr.wildcard = h[1:], true
		default:
			cr.host = h
		}
		if len(r.Origins) > 0 {
			cr.origins = make(map[string]struct{}, len(r.Origins))
			for _, o := range r.Origins {
				cr.origins[strings.ToLower(o)] = struct{}{}
			}
		}
		rt = append(rt, cr)
	}
	return rt
}

// match returns the first route for host (as sent, maybe with a port and a
// final dot, which names the same host to DNS and to most servers) and
// path, or nil.
func (rt routeTable) match(host, path []byte) *route {
	host = bytes.TrimRight(stripPort(host), ".")
	for _, r := range rt {
		if !r.matchHost(host) || !bytes.HasPrefix(path, r.pathPrefix) {
			continue
		}
		return r
	}
	return nil
}

func (r *route) matchHost(host []byte) bool {
	switch {
	case r.host == "":
		return true
	case r.wildcard:
		return len(host) > len(r.host) && equalFoldSuffix(host, r.host)
	default:
		return len(host) == len(r.host) && equalFoldSuffix(host, r.host)
	}
}

// originAllowed reports whether the Origin header value is on the route's
// allow-list (always true without one).
func (r *route) originAllowed(origin []byte) bool {
	if r.origins == nil {
		return true
	}
	_, ok := r.origins[strings.ToLower(string(origin))]
	return ok
}

// ownsHeader reports whether the header name k is one of the route's
// auth_headers, which a client may not send, under any spelling a node
// may read as that name (see sameHeader).
func (r *route) ownsHeader(k []byte) bool {
	for _, name := range r.strip {
		if sameHeader(k, name) {
			return true
		}
	}
	return false
}

// sameHeader reports whether header names k and name are one to a node:
// equal ignoring case, with "_" and " " taken for "-", since CGI, WSGI, PHP
// and Rack map X-User-Id, X_User_Id and "X User Id" alike to HTTP_X_USER_ID.
func sameHeader(k []byte, name string) bool {
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

// equalFoldSuffix reports whether s ends with the lowercase ASCII suffix,
// ignoring the case of s.
func equalFoldSuffix(s []byte, suffix string) bool {
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

// stripPort drops a trailing ":port" from a Host header value, keeping
// bracketed IPv6 literals whole.
func stripPort(host []byte) []byte {
	i := bytes.LastIndexByte(host, ':')
	if i < 0 || bytes.IndexByte(host[i:], ']') >= 0 {
		return host
	}
	if len(host) > 0 && host[0] == '[' {
		return host[:i]
	}
	if bytes.IndexByte(host[:i], ':') >= 0 {
		return host // a bare IPv6 literal without port
	}
	return host[:i]
}
