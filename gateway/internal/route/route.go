// Package route is the gateway's route table: the [[routes]] entries
// compiled once at load for matching a request's host and path, each with
// its pool, its Origin allow-list, the headers it owns (auth_headers),
// its limits and where its pool's hash key is read from the request.
package route

import (
	"bytes"
	"strings"
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/internal/httpheader"
)

// Route is a [[routes]] entry compiled for matching: lowercase host pattern,
// its pool resolved, limits converted once at load. It is read-only once
// compiled.
type Route struct {
	Name       string   // host and path prefix, as logs and plugins see it
	Auth       []string // plugin chain
	host       string   // "" matches any host; "*.x.y" stored as ".x.y"
	wildcard   bool
	pathPrefix []byte
	Pool       *upstream.Pool // where the route's requests go
	// HashKey is where a request's key is found when Pool is a hash pool
	// (pools.hash_key); none for the others.
	HashKey  HashKey
	origins  map[string]struct{} // nil: any origin
	Overflow string              // a full pool's answer: "http-503" or "close-1013"
	MaxFrame uint64              // the largest frame a client may send, in bytes
	// Keepalive pings and the client's rate caps (0 = off).
	PingInterval, PongTimeout time.Duration
	FrameRate, ByteRate       uint64
	PlainHTTP                 bool     // plain requests are proxied; false: refused with 426
	strip                     []string // auth_headers, lowercase: removed from client input
}

// Table is an ordered list of routes; the first match wins.
type Table []*Route

// Compile compiles cfg's routes, resolving each route's pool by name in
// pools (built from cfg).
func Compile(cfg *conf.Config, pools map[string]*upstream.Pool) Table {
	keys := map[string]HashKey{}
	for _, pc := range cfg.Pools {
		if pc.Balance == balancer.PolicyHash {
			keys[pc.Name] = ParseHashKey(pc.HashKey)
		}
	}
	rt := make(Table, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		cr := &Route{
			Name:         r.Host + r.PathPrefix,
			Auth:         r.Auth,
			pathPrefix:   []byte(r.PathPrefix),
			Pool:         pools[r.Pool],
			HashKey:      keys[r.Pool],
			Overflow:     r.Overflow,
			MaxFrame:     uint64(r.MaxFrame),
			PingInterval: r.PingInterval.Duration,
			PongTimeout:  r.PongTimeout.Duration,
			FrameRate:    uint64(r.FrameRate),
			ByteRate:     uint64(r.ByteRate),
			PlainHTTP:    r.PlainHTTP != "refuse",
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

// Match returns the first route for host (as sent, maybe with a port and a
// final dot, which names the same host to DNS and to most servers) and
// path, or nil.
func (rt Table) Match(host, path []byte) *Route {
	host = bytes.TrimRight(stripPort(host), ".")
	for _, r := range rt {
		if !r.matchHost(host) || !bytes.HasPrefix(path, r.pathPrefix) {
			continue
		}
		return r
	}
	return nil
}

func (r *Route) matchHost(host []byte) bool {
	switch {
	case r.host == "":
		return true
	case r.wildcard:
		return len(host) > len(r.host) && httpheader.HasSuffixFold(host, r.host)
	default:
		return len(host) == len(r.host) && httpheader.HasSuffixFold(host, r.host)
	}
}

// OriginAllowed reports whether the Origin header value is on the route's
// allow-list (always true without one).
func (r *Route) OriginAllowed(origin []byte) bool {
	if r.origins == nil {
		return true
	}
	_, ok := r.origins[strings.ToLower(string(origin))]
	return ok
}

// OwnsHeader reports whether the header name k is one of the route's
// auth_headers, which a client may not send, under any spelling a node
// may read as that name (see SameHeader).
func (r *Route) OwnsHeader(k []byte) bool {
	for _, name := range r.strip {
		if httpheader.Same(k, name) {
			return true
		}
	}
	return false
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
