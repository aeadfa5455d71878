package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisTarget names one Redis deployment: exactly one of URL (a single
// server), Cluster (a Redis Cluster) or SentinelMaster with Sentinels (a
// master found through Sentinel) is set. The Redis bus and the room log
// (package roomlog) connect through it.
type RedisTarget struct {
	// URL of a single Redis server, e.g. "redis://127.0.0.1:6379/0".
	URL string
	// Cluster holds seed addresses (host:port) of a Redis Cluster. With a
	// cluster, rooms use sharded pub/sub (SPUBLISH, SSUBSCRIBE) and every
	// key and channel of a room carries the room id as a hash tag, "{room}",
	// so one shard holds all of a room's traffic.
	Cluster []string
	// SentinelMaster is the master's name known to the Sentinels.
	SentinelMaster string
	// Sentinels holds the Sentinels' addresses (host:port).
	Sentinels []string
}

// ErrNoTarget is returned when a RedisTarget names no deployment, or more
// than one.
var ErrNoTarget = errors.New("bus: exactly one of a Redis URL, cluster addresses or a sentinel master must be set")

// Sharded reports whether the target is a Redis Cluster, whose rooms use
// sharded pub/sub and hash-tagged names.
func (t RedisTarget) Sharded() bool { return len(t.Cluster) > 0 }

// String names the target for logs and errors.
func (t RedisTarget) String() string {
	switch {
	case t.Sharded():
		return "cluster " + strings.Join(t.Cluster, ",")
	case t.SentinelMaster != "":
		return "sentinel " + t.SentinelMaster + "@" + strings.Join(t.Sentinels, ",")
	}
	return t.URL
}

// Client returns a client for the target: a ClusterClient for a cluster,
// a failover client for a Sentinel master, a plain client for a URL.
// Deadlines of callers' contexts bound each command (ContextTimeoutEnabled).
func (t RedisTarget) Client() (redis.UniversalClient, error) {
	set := 0
	for _, b := range []bool{t.URL != "", len(t.Cluster) > 0, t.SentinelMaster != "" || len(t.Sentinels) > 0} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, ErrNoTarget
	}
	switch {
	case t.Sharded():
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 t.Cluster,
			ContextTimeoutEnabled: true,
		})
		cc.AddHook(reloadOnError{cc})
		return cc, nil
	case t.URL != "":
		opt, err := redis.ParseURL(t.URL)
		if err != nil {
			return nil, fmt.Errorf("parse redis url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	}
	if t.SentinelMaster == "" || len(t.Sentinels) == 0 {
		return nil, fmt.Errorf("sentinel needs a master name and at least one address: %w", ErrNoTarget)
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            t.SentinelMaster,
		SentinelAddrs:         t.Sentinels,
		ContextTimeoutEnabled: true,
	}), nil
}

// OpenClient returns shared, when it is not nil, for the caller to use
// but not close; otherwise a new client for url or, when url is empty, for
// t, which the caller closes (owned).
func OpenClient(shared redis.UniversalClient, url string, t RedisTarget) (c redis.UniversalClient, owned bool, err error) {
	if shared != nil {
		return shared, false, nil
	}
	if url != "" {
		t = RedisTarget{URL: url}
	}
	c, err = t.Client()
	return c, err == nil, err
}

// IsCluster reports whether c is a Redis Cluster client, whose rooms use
// sharded pub/sub and hash-tagged names.
func IsCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// reloadOnError asks a ClusterClient to reload its slot map after a failed
// command. go-redis reloads it on MOVED and ASK replies and once a minute,
// but not when a master stops answering: without this, commands for the
// slots of a dead master would keep going to it for up to a minute after
// its replica took over. Reloads are lazy and coalesced by go-redis.
type reloadOnError struct{ cc *redis.ClusterClient }

func (h reloadOnError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && !errors.Is(err, redis.Nil) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && !errors.Is(err, redis.Nil) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

// ParseAddrs splits "ADDR[,ADDR...]" into host:port addresses, rejecting
// an empty list or an address without a port.
func ParseAddrs(s string) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		i := strings.LastIndexByte(a, ':')
		if i <= 0 || i == len(a)-1 {
			return nil, fmt.Errorf("address %q is not host:port", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// ParseSentinel splits "MASTER@ADDR[,ADDR...]" into the master's name and
// the Sentinels' addresses.
func ParseSentinel(s string) (master string, addrs []string, err error) {
	master, list, ok := strings.Cut(s, "@")
	if !ok || master == "" {
		return "", nil, fmt.Errorf("%q is not MASTER@ADDR[,ADDR...]", s)
	}
	addrs, err = ParseAddrs(list)
	if err != nil {
		return "", nil, err
	}
	return master, addrs, nil
}

// ChannelName names room's pub/sub channel: prefix+room, or prefix+"{room}"
// when sharded, so the channel hashes to the slot of the room's log keys.
func ChannelName(prefix, room string, sharded bool) string {
	if sharded {
		return prefix + "{" + room + "}"
	}
	return prefix + room
}

// roomOf is ChannelName's inverse.
func roomOf(prefix, ch string, sharded bool) (string, bool) {
	room, ok := strings.CutPrefix(ch, prefix)
	if !ok || !sharded {
		return room, ok
	}
	room, ok = strings.CutPrefix(room, "{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(room, "}")
}

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key without one, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) & 16383
}
