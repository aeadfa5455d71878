package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Key is the Redis key under which a relay reachable at addr registers
// itself: prefix, ":", addr.
func Key(prefix, addr string) string { return prefix + ":" + addr }

// ParseKey returns the node address in key, a key written by Key with
// prefix, or false when key is not one: another prefix, or an address
// that is not host:port with a port 1-65535.
func ParseKey(prefix, key string) (string, bool) {
	addr, ok := strings.CutPrefix(key, prefix+":")
	if !ok {
		return "", false
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(host, " \t\r\n") {
		return "", false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
		return "", false
	}
	return addr, true
}

// matchPattern is the SCAN MATCH pattern of the keys under prefix, the
// glob characters of prefix escaped.
func matchPattern(prefix string) string {
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteString(":*")
	return b.String()
}

// maxScanPages bounds one lookup's SCAN calls; each asks for scanCount
// keys, so a lookup reads at most about a million keys.
const (
	maxScanPages = 10_000
	scanCount    = 100
)

// Redis finds nodes by the keys relays keep in Redis (see Key): every key
// under the prefix is a node of weight 1. A relay refreshes its key's TTL
// while it serves and deletes it when it starts draining, so a relay that
// dies vanishes when its key expires. A Redis is safe for concurrent use;
// Close it when done.
type Redis struct {
	prefix string
	c      *redis.Client
}

// NewRedis returns a Redis source reading the keys under prefix from the
// server at url (redis:// or rediss://). It connects lazily.
func NewRedis(url, prefix string) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL it quotes, which may hold a password
		}
		return nil, fmt.Errorf("discovery redis URL: %w", err)
	}
	// A lookup's context bounds it: without this, a Redis that accepts
	// and never answers held each lookup for go-redis's own timeouts
	// (seconds), whatever the interval.
	opt.ContextTimeoutEnabled = true
	return &Redis{prefix: prefix, c: redis.NewClient(opt)}, nil
}

// Lookup scans the keys under the prefix once.
func (r *Redis) Lookup(ctx context.Context) ([]Node, error) {
	var nodes []Node
	seen := map[string]bool{}
	match := matchPattern(r.prefix)
	var cursor uint64
	for range maxScanPages {
		keys, next, err := r.c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", match, err)
		}
		for _, k := range keys {
			if addr, ok := ParseKey(r.prefix, k); ok && !seen[addr] {
				seen[addr] = true // SCAN may return a key twice
				nodes = append(nodes, Node{Addr: addr, Weight: 1})
			}
		}
		if len(nodes) > MaxNodes { // stop before reading a million keys
			return nil, fmt.Errorf("scan %s: %w", match, ErrTooMany)
		}
		if cursor = next; cursor == 0 {
			return nodes, nil
		}
	}
	return nil, fmt.Errorf("scan %s: more than %d pages of keys", match, maxScanPages)
}

// Close closes the connections to Redis.
func (r *Redis) Close() error { return r.c.Close() }

var (
	_ Source = (*DNS)(nil)
	_ Source = (*Redis)(nil)
)
