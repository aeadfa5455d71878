package roomlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/relay-backend/bus"
)

// RedisOptions configures a Redis log.
type RedisOptions struct {
	// URL of the Redis server, e.g. "redis://127.0.0.1:6379/0" (required
	// unless Target names another deployment).
	URL string
	// Target names a Redis Cluster or a Sentinel master instead, when URL
	// is empty. On a cluster the committed messages are published with
	// SPUBLISH on ChannelPrefix+"{room}", in the slot of the room's keys.
	Target bus.RedisTarget
	// Client, when set, is used instead of URL and Target, and left open
	// by Close (see bus.RedisOptions.Client).
	Client redis.UniversalClient
	// History is how many messages a room's Stream retains, trimmed with
	// MAXLEN ~ so a few more may stay (default 1000 messages).
	History int
	// TTL is how long a room's keys live after its last message (default
	// 24h, at millisecond resolution).
	TTL time.Duration
	// KeyPrefix is put before the room's keys: {KeyPrefix}{room}:meta, a
	// hash of epoch and offset, and {KeyPrefix}{room}:log, the Stream (the
	// braces make both hash to one Redis Cluster slot; default "wsgate:").
	KeyPrefix string
	// ChannelPrefix is put before the room id to name the channel the
	// committed messages are published on (default "wsgate:room:", the
	// bus's default).
	ChannelPrefix string
	// WaitReplicas, when above 0, makes Append wait after each commit until
	// that many replicas of the room's master acknowledged it (Redis WAIT,
	// on the connection that ran the append script), for at most
	// WaitTimeout; fewer makes Append fail with ErrNotReplicated. Redis
	// replicates asynchronously: without it, a commit its master had not
	// yet sent to a replica is lost when the replica takes over.
	WaitReplicas int
	// WaitTimeout bounds the WAIT (default 200ms; Redis reads 0 as
	// forever, which is never used).
	WaitTimeout time.Duration
}

// DefaultWaitTimeout is RedisOptions.WaitTimeout's default.
const DefaultWaitTimeout = 200 * time.Millisecond

// ErrNotReplicated is returned by Redis.Append when fewer than
// RedisOptions.WaitReplicas replicas acknowledged the commit within
// WaitTimeout. The message was committed on the master (and published), so
// it may survive or be lost with the master; it must not be acknowledged.
var ErrNotReplicated = errors.New("roomlog: commit not acknowledged by enough replicas")

// Redis is a room log in Redis: per room a hash {e: epoch, o: offset} and a
// Stream whose entry ids are "<offset>-0". Every call is one script run
// (EVALSHA, loaded at start, reloaded if the server lost it), so each is
// atomic. Redis is safe for concurrent use.
type Redis struct {
	client  redis.UniversalClient
	owned   bool // Close closes client
	sharded bool
	append  *redis.Script
	history string
	ttlMS   string
	keys    string
	channel string
	waitN   int           // RedisOptions.WaitReplicas
	waitFor time.Duration // RedisOptions.WaitTimeout
}

// appendScript commits one message: KEYS meta, stream; ARGV new epoch,
// maxlen, ttl in ms, channel, data. It returns {epoch, offset}. A missing
// meta hash starts a new epoch and drops any stream left from the old one,
// whose ids would be above the new offsets.
var appendScript = redis.NewScript(appendSource)

// shardedAppendScript is appendScript for a Redis Cluster: SPUBLISH, on a
// channel in the slot of the keys, instead of PUBLISH.
var shardedAppendScript = redis.NewScript(strings.Replace(appendSource, "'PUBLISH'", "'SPUBLISH'", 1))

const appendSource = `
local e = redis.call('HGET', KEYS[1], 'e')
if not e then
  e = ARGV[1]
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'e', e, 'o', 0)
end
local o = redis.call('HINCRBY', KEYS[1], 'o', 1)
local id = string.format('%d-0', o)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], id, 'd', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PUBLISH', ARGV[4], string.format('%d ', o) .. e .. ' ' .. ARGV[5])
return {e, o}
`

// readScript returns {epoch, offset[, entries]}: KEYS meta, stream; ARGV new
// epoch, ttl in ms, and the first stream id to return ("" for none). A
// missing room gets its epoch now, so every reader sees the same one.
var readScript = redis.NewScript(`
local e = redis.call('HGET', KEYS[1], 'e')
if not e then
  e = ARGV[1]
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'e', e, 'o', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local o = redis.call('HGET', KEYS[1], 'o')
if ARGV[3] == '' then
  return {e, o}
end
return {e, o, redis.call('XRANGE', KEYS[2], ARGV[3], '+')}
`)

// NewRedis connects to o.URL (or o.Target) and loads the scripts. Close
// releases it.
func NewRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	client, owned, err := bus.OpenClient(o.Client, o.URL, o.Target)
	if err != nil {
		return nil, err
	}
	sharded := bus.IsCluster(client)
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.ChannelPrefix == "" {
		o.ChannelPrefix = DefaultChannelPrefix
	}
	if o.WaitReplicas > 0 && o.WaitTimeout <= 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.WaitReplicas > 0 && !canWait(client) {
		if owned {
			_ = client.Close()
		}
		return nil, fmt.Errorf("room log: waiting for replicas needs a Redis, cluster or Sentinel client, not %T", client)
	}
	app := appendScript
	if sharded {
		app = shardedAppendScript
	}
	for _, s := range []*redis.Script{app, readScript} {
		// On a cluster the script goes to every shard; a server that
		// lost it (a promoted replica) gets it again with EVAL.
		if err := s.Load(ctx, client).Err(); err != nil {
			if owned {
				_ = client.Close()
			}
			return nil, fmt.Errorf("load room log script: %w", err)
		}
	}
	return &Redis{
		client:  client,
		owned:   owned,
		sharded: sharded,
		append:  app,
		history: strconv.Itoa(o.History),
		ttlMS:   strconv.FormatInt(max(o.TTL.Milliseconds(), 1), 10),
		keys:    o.KeyPrefix,
		channel: o.ChannelPrefix,
		waitN:   o.WaitReplicas,
		waitFor: o.WaitTimeout,
	}, nil
}

func (r *Redis) roomKeys(room string) []string {
	base := r.keys + "{" + room + "}:"
	return []string{base + "meta", base + "log"}
}

// Append commits data to room and publishes it; it returns the entry's
// position. data is sent as is.
// With WaitReplicas set, a commit too few replicas acknowledged returns its
// position and an error wrapping ErrNotReplicated.
func (r *Redis) Append(ctx context.Context, room string, data []byte) (Position, error) {
	keys := r.roomKeys(room)
	args := []any{NewEpoch(), r.history, r.ttlMS, bus.ChannelName(r.channel, room, r.sharded), data}
	if r.waitN > 0 {
		return r.appendWait(ctx, room, keys, args)
	}
	p, err := scriptPosition(r.append.Run(ctx, r.client, keys, args...))
	if err != nil {
		return Position{}, fmt.Errorf("append to room %q: %w", room, err)
	}
	return p, nil
}

// scriptPosition reads the {epoch, offset} a script run returned.
func scriptPosition(cmd *redis.Cmd) (Position, error) {
	v, err := cmd.Slice()
	if err != nil {
		return Position{}, err
	}
	return parsePosition(v)
}

// canWait reports whether appendWait can find the connection to a key's
// master for c: a cluster client (MasterForKey) or a client of one server,
// which a Sentinel failover client also is.
func canWait(c redis.UniversalClient) bool {
	switch c.(type) {
	case *redis.ClusterClient, *redis.Client:
		return true
	}
	return false
}

// appendWait runs the append script and WAIT in one pipeline on a client
// of the key's master: go-redis writes a pipeline's commands on one pooled
// connection (a retry resends them all on another), and WAIT counts the
// replicas that acknowledged every write made before it on its connection.
// WAIT cannot run inside the script (Redis refuses it there).
func (r *Redis) appendWait(ctx context.Context, room string, keys []string, args []any) (Position, error) {
	var c *redis.Client
	cc, cluster := r.client.(*redis.ClusterClient)
	if cluster {
		var err error
		if c, err = cc.MasterForKey(ctx, keys[0]); err != nil {
			return Position{}, fmt.Errorf("append to room %q: master of its slot: %w", room, err)
		}
	} else {
		c = r.client.(*redis.Client) // checked by NewRedis
	}
	var res *redis.Cmd
	var wait *redis.Cmd // Pipeliner has no Wait method
	run := func(sha bool) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if sha {
				res = r.append.EvalSha(ctx, p, keys, args...)
			} else { // a promoted replica or restarted server lost the script
				res = r.append.Eval(ctx, p, keys, args...)
			}
			wait = p.Do(ctx, "wait", r.waitN, max(r.waitFor.Milliseconds(), 1))
			return nil
		})
		return err
	}
	err := run(true)
	if redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		err = run(false)
	}
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		if cluster {
			// The node client is outside the cluster client's hooks: a dead
			// master or a MOVED reply must refresh the slot map here.
			cc.ReloadState(ctx)
		}
		return Position{}, fmt.Errorf("append to room %q: %w", room, err)
	}
	p, err := scriptPosition(res)
	if err != nil {
		return Position{}, fmt.Errorf("append to room %q: %w", room, err)
	}
	if n, err := wait.Int64(); err != nil || n < int64(r.waitN) {
		return p, fmt.Errorf("append to room %q: offset %d reached %d of %d replicas in %v (%v): %w",
			room, p.Offset, n, r.waitN, r.waitFor, err, ErrNotReplicated)
	}
	return p, nil
}

// Position returns room's epoch and last committed offset, creating the
// epoch if the room has none.
func (r *Redis) Position(ctx context.Context, room string) (Position, error) {
	p, err := scriptPosition(readScript.Run(ctx, r.client, r.roomKeys(room), NewEpoch(), r.ttlMS, ""))
	if err != nil {
		return Position{}, fmt.Errorf("position of room %q: %w", room, err)
	}
	return p, nil
}

// Range returns the room's position and its retained entries with offsets
// above after, in order. When the first returned offset is not after+1,
// the history was trimmed past after.
func (r *Redis) Range(ctx context.Context, room string, after uint64) (Position, []Entry, error) {
	start := strconv.FormatUint(after+1, 10) + "-0"
	if after == ^uint64(0) {
		start = "+" // nothing can follow
	}
	v, err := readScript.Run(ctx, r.client, r.roomKeys(room), NewEpoch(), r.ttlMS, start).Slice()
	if err != nil {
		return Position{}, nil, fmt.Errorf("range of room %q: %w", room, err)
	}
	p, err := parsePosition(v)
	if err != nil || len(v) != 3 {
		return Position{}, nil, fmt.Errorf("range of room %q: %w (reply %v)", room, err, v)
	}
	raw, ok := v[2].([]any)
	if !ok {
		return Position{}, nil, fmt.Errorf("range of room %q: entries of type %T", room, v[2])
	}
	entries := make([]Entry, 0, len(raw))
	for _, x := range raw {
		e, err := parseStreamEntry(x)
		if err != nil {
			return Position{}, nil, fmt.Errorf("range of room %q: %w", room, err)
		}
		if e.Offset > p.Offset {
			break
		}
		e.Epoch = p.Epoch
		entries = append(entries, e)
	}
	return p, entries, nil
}

// Close closes the connection pool, unless it was handed in as Client.
func (r *Redis) Close() error {
	if !r.owned {
		return nil
	}
	if err := r.client.Close(); err != nil {
		return fmt.Errorf("close room log: %w", err)
	}
	return nil
}

func parsePosition(v []any) (Position, error) {
	if len(v) < 2 {
		return Position{}, fmt.Errorf("script reply of %d items", len(v))
	}
	e, ok := v[0].(string)
	if !ok {
		return Position{}, fmt.Errorf("epoch of type %T", v[0])
	}
	var off uint64
	switch o := v[1].(type) {
	case int64:
		off = uint64(o)
	case string:
		n, err := strconv.ParseUint(o, 10, 64)
		if err != nil {
			return Position{}, fmt.Errorf("offset %q: %w", o, err)
		}
		off = n
	default:
		return Position{}, fmt.Errorf("offset of type %T", v[1])
	}
	return Position{Epoch: e, Offset: off}, nil
}

func parseStreamEntry(x any) (Entry, error) {
	pair, ok := x.([]any)
	if !ok || len(pair) != 2 {
		return Entry{}, fmt.Errorf("stream entry %v", x)
	}
	id, _ := pair[0].(string)
	offs, ok := strings.CutSuffix(id, "-0")
	if !ok {
		return Entry{}, fmt.Errorf("stream entry id %q", id)
	}
	off, err := strconv.ParseUint(offs, 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("stream entry id %q: %w", id, err)
	}
	fields, ok := pair[1].([]any)
	if !ok || len(fields) != 2 {
		return Entry{}, fmt.Errorf("stream entry %q fields %v", id, pair[1])
	}
	data, _ := fields[1].(string)
	return Entry{Offset: off, Data: []byte(data)}, nil
}
