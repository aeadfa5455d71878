// Package acmestore keeps ACME accounts, certificates and their locks in
// Redis (certmagic.Storage), so that every gateway of a fleet shares one
// account and one copy of each certificate, and exactly one of them
// orders a certificate at a time.
package acmestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
)

// Prefix starts every key the storage writes: "wsgate:acme:v:" a value,
// "wsgate:acme:lock:" a lock, "wsgate:acme:index" the sorted set of the
// value keys (List and directory checks read it rather than SCAN a
// Redis that holds other data).
const Prefix = "wsgate:acme:"

// MaxValue bounds one stored value: an account, a certificate chain, a
// key or their metadata are a few KiB. A larger value is refused on
// Store and, should someone with write access to the Redis plant one,
// on Load, without reading it into memory.
const MaxValue = 1 << 20

// Lock timings: a lock is set with a TTL of LockTTL and renewed every
// LockTTL/3 while held, so a gateway that dies holding it frees it within
// LockTTL; Lock polls a taken lock every lockPoll.
const (
	DefaultLockTTL = 30 * time.Second
	lockPoll       = 250 * time.Millisecond
)

// ErrTooLarge is returned by Store and Load for a value over MaxValue.
var ErrTooLarge = errors.New("acmestore: value over 1 MiB")

// Redis is a certmagic.Storage in Redis. Keys are certmagic's paths
// ("certificates/acme.../name.crt"); "directories" are the prefixes of
// the keys. It is safe for concurrent use; Close stops it.
type Redis struct {
	c       *redis.Client
	lockTTL time.Duration
	owner   string // this process's lock-token prefix, for the log
	log     *slog.Logger

	mu sync.Mutex
	// held are the locks this process holds, by name, each with its
	// token: more than one for a name when a holder's lock expired (Redis
	// unreachable past the TTL) and another caller of this process took
	// it (see Unlock).
	held  map[string][]*heldLock
	close sync.Once
}

// heldLock is a lock this process holds: its token and the renewal
// goroutine's stop.
type heldLock struct {
	token string
	stop  context.CancelFunc
	done  chan struct{}
}

// Open connects to the Redis at url (redis:// or rediss://). lockTTL is
// the TTL of a lock (0: DefaultLockTTL); log gets a line for a lock lost.
// Nothing is sent before the first call.
func Open(url string, lockTTL time.Duration, log *slog.Logger) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("acme storage: %w", err)
	}
	if lockTTL <= 0 {
		lockTTL = DefaultLockTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Redis{c: redis.NewClient(opt), lockTTL: lockTTL, owner: randomToken()[:8], log: log, held: map[string][]*heldLock{}}, nil
}

// Close releases the locks still held and closes the connections.
func (r *Redis) Close() error {
	var err error
	r.close.Do(func() {
		r.mu.Lock()
		var names []string
		for n, hs := range r.held {
			for range hs {
				names = append(names, n)
			}
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, n := range names {
			_ = r.Unlock(ctx, n)
		}
		err = r.c.Close()
	})
	return err
}

func valueKey(key string) string { return Prefix + "v:" + key }
func lockKey(name string) string { return Prefix + "lock:" + name }

const indexKey = Prefix + "index"

// storeScript writes a value and its modification time, and indexes its
// key, in one step.
var storeScript = redis.NewScript(`
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'm', ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[3])
return 1`)

// Store writes value at key.
func (r *Redis) Store(ctx context.Context, key string, value []byte) error {
	if len(value) > MaxValue {
		return fmt.Errorf("store %s: %w", key, ErrTooLarge)
	}
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := storeScript.Run(ctx, r.c, []string{valueKey(key), indexKey}, value, now, key).Err(); err != nil {
		return fmt.Errorf("store %s: %w", key, err)
	}
	return nil
}

// loadScript returns a value, or -1 for none, or -2 when it is over the
// bound (ARGV[1]); the size is read first, so a huge value is never sent.
var loadScript = redis.NewScript(`
local n = redis.call('HSTRLEN', KEYS[1], 'v')
if n == 0 and redis.call('HEXISTS', KEYS[1], 'v') == 0 then return -1 end
if n > tonumber(ARGV[1]) then return -2 end
return redis.call('HGET', KEYS[1], 'v')`)

// Load reads the value at key: fs.ErrNotExist when there is none,
// ErrTooLarge when it is over MaxValue.
func (r *Redis) Load(ctx context.Context, key string) ([]byte, error) {
	v, err := loadScript.Run(ctx, r.c, []string{valueKey(key)}, MaxValue).Result()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", key, err)
	}
	switch v := v.(type) {
	case string:
		return []byte(v), nil
	case int64:
		if v == -2 {
			return nil, fmt.Errorf("load %s: %w", key, ErrTooLarge)
		}
		return nil, fmt.Errorf("load %s: %w", key, fs.ErrNotExist)
	}
	return nil, fmt.Errorf("load %s: unexpected reply %T", key, v)
}

// deleteTries bounds the transactions one Delete tries while others
// change the index under it.
const deleteTries = 5

// Delete removes key, and every key below it when it is a directory, and
// their index entries, in one transaction: the keys below are read from
// the index under WATCH, then deleted by MULTI/EXEC, tried again when the
// index changed meanwhile. Every key it touches is named in its commands
// (a script would have had to reach keys it does not declare). A key that
// is not there is no error (certmagic.Storage: "return nil in that
// case").
func (r *Redis) Delete(ctx context.Context, key string) error {
	var err error
	for range deleteTries {
		err = r.c.Watch(ctx, func(tx *redis.Tx) error {
			below, err := tx.ZRangeArgs(ctx, redis.ZRangeArgs{Key: indexKey, Start: "[" + key + "/", Stop: "[" + key + "/\xff", ByLex: true}).Result()
			if err != nil {
				return err
			}
			keys := make([]string, 0, 1+len(below))
			members := make([]any, 0, 1+len(below))
			for _, k := range append([]string{key}, below...) {
				keys = append(keys, valueKey(k))
				members = append(members, k)
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, keys...)
				p.ZRem(ctx, indexKey, members...)
				return nil
			})
			return err
		}, indexKey)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a value or a directory.
func (r *Redis) Exists(ctx context.Context, key string) bool {
	_, err := r.Stat(ctx, key)
	return err == nil
}

// below returns the indexed keys under dir ("dir/..."), or every key for
// dir "".
func (r *Redis) below(ctx context.Context, dir string) ([]string, error) {
	min, max := "-", "+"
	if dir != "" {
		min, max = "["+dir+"/", "["+dir+"/\xff"
	}
	return r.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: indexKey, Start: min, Stop: max, ByLex: true}).Result()
}

// List returns the keys directly in dir (the values and the directories),
// or every value key below it when recursive.
func (r *Redis) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	dir = strings.TrimSuffix(dir, "/")
	keys, err := r.below(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("list %s: %w", dir, fs.ErrNotExist)
	}
	if recursive {
		return keys, nil
	}
	start := 0
	if dir != "" {
		start = len(dir) + 1
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range keys {
		child := k
		if i := strings.IndexByte(k[start:], '/'); i >= 0 {
			child = k[:start+i]
		}
		if !seen[child] {
			seen[child] = true
			out = append(out, child)
		}
	}
	return out, nil
}

// Stat describes key: a value (its size and modification time) or a
// directory; fs.ErrNotExist when it is neither.
func (r *Redis) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	vals, err := r.c.HMGet(ctx, valueKey(key), "m").Result()
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if m, ok := vals[0].(string); ok {
		n, err := r.c.HStrLen(ctx, valueKey(key), "v").Result()
		if err != nil {
			return certmagic.KeyInfo{}, fmt.Errorf("stat %s: %w", key, err)
		}
		ns, _ := strconv.ParseInt(m, 10, 64)
		return certmagic.KeyInfo{Key: key, Modified: time.Unix(0, ns), Size: n, IsTerminal: true}, nil
	}
	keys, err := r.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: indexKey, Start: "[" + key + "/", Stop: "[" + key + "/\xff", ByLex: true, Count: 1}).Result()
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if len(keys) == 0 {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s: %w", key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// Lock takes the lock name, waiting while another holder (this process
// or another gateway) has it, until ctx ends. The lock is a key set with
// SET NX PX and a random token, one for the whole call, and taking it is
// idempotent for that token (acquireScript): a try whose SET went through
// but whose reply was lost (go-redis, or this loop, tries again) finds
// its own token and holds the lock, rather than waiting a TTL for a lock
// nobody would ever release. While held it is renewed every third of its
// TTL, so only a holder that died loses it, at most a TTL later.
func (r *Redis) Lock(ctx context.Context, name string) error {
	token := r.owner + ":" + randomToken()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock %s: %w", name, ctx.Err())
		case <-t.C:
		}
		n, err := acquireScript.Run(ctx, r.c, []string{lockKey(name)}, token, r.lockTTL.Milliseconds()).Int()
		if err != nil {
			// Redis down, or the reply lost: keep trying until ctx
			// ends, as a taken lock (the next try may find it ours).
			t.Reset(lockPoll * 4)
			continue
		}
		if n == 1 {
			r.hold(name, token)
			return nil
		}
		t.Reset(lockPoll)
	}
}

// acquireScript takes a lock (KEYS[1]) for the token ARGV[1] with a TTL of
// ARGV[2] ms: set if free, or, when it already holds this very token (an
// earlier try of the same Lock set it), renewed; 1 then, 0 when another
// token holds it.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

// hold records a lock taken and starts renewing it.
func (r *Redis) hold(name, token string) {
	ctx, stop := context.WithCancel(context.Background())
	h := &heldLock{token: token, stop: stop, done: make(chan struct{})}
	r.mu.Lock()
	r.held[name] = append(r.held[name], h)
	r.mu.Unlock()
	go r.keepLock(ctx, name, h)
}

// renewScript extends a lock's TTL if it still holds the token.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// unlockScript deletes a lock if it still holds the token: a lock that
// expired and was taken by another is left to its new holder.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// keepLock renews a held lock every third of its TTL until it is
// released. A renewal that finds the lock gone (it expired while Redis was
// unreachable, and another took it) stops, and says so in the log: the
// work under it goes on, and certmagic checks the storage again before it
// saves.
func (r *Redis) keepLock(ctx context.Context, name string, h *heldLock) {
	defer close(h.done)
	tick := time.NewTicker(r.lockTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n, err := renewScript.Run(ctx, r.c, []string{lockKey(name)}, h.token, r.lockTTL.Milliseconds()).Int()
		if err == nil && n == 0 {
			r.log.Warn("ACME storage lock lost: it expired (Redis unreachable past its TTL?) and may have been taken by another holder; the work under it goes on",
				"lock", name, "owner", r.owner, "ttl", r.lockTTL)
			return
		}
	}
}

// Unlock releases the lock name if this process holds it. certmagic
// names the lock only, so when this process has two holders of name (the
// first one's lock expired and the second took it), the first's is
// released: the one whose token no longer holds the lock in Redis, so
// that a holder finishing late never frees the lock another holds now.
// Should the second finish first, its lock is kept until the first's
// Unlock: held too long, never by two.
func (r *Redis) Unlock(ctx context.Context, name string) error {
	h, err := r.release(ctx, name)
	if err != nil {
		return err
	}
	h.stop()
	<-h.done
	if err := unlockScript.Run(ctx, r.c, []string{lockKey(name)}, h.token).Err(); err != nil {
		return fmt.Errorf("unlock %s: %w", name, err)
	}
	return nil
}

// release takes out of held the holder of name that Unlock releases.
func (r *Redis) release(ctx context.Context, name string) (*heldLock, error) {
	r.mu.Lock()
	n := len(r.held[name])
	r.mu.Unlock()
	if n == 0 {
		return nil, fmt.Errorf("unlock %s: not held by this gateway", name)
	}
	current := ""
	if n > 1 {
		// Which token holds the lock now; on an error none is taken
		// for current, and the first holder goes.
		current, _ = r.c.Get(ctx, lockKey(name)).Result()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.held[name]
	if len(hs) == 0 { // released meanwhile by another Unlock
		return nil, fmt.Errorf("unlock %s: not held by this gateway", name)
	}
	i := 0
	for j, h := range hs {
		if h.token != current {
			i = j
			break
		}
	}
	h := hs[i]
	if hs = slices.Delete(hs, i, i+1); len(hs) == 0 {
		delete(r.held, name)
	} else {
		r.held[name] = hs
	}
	return h, nil
}

// RenewLockLease extends a held lock to lease (certmagic asks before each
// retry of a long order). With two holders of name in this process it
// extends the one that holds the lock now, whichever asks.
func (r *Redis) RenewLockLease(ctx context.Context, name string, lease time.Duration) error {
	r.mu.Lock()
	var tokens []string
	for _, h := range r.held[name] {
		tokens = append(tokens, h.token)
	}
	r.mu.Unlock()
	if len(tokens) == 0 {
		return fmt.Errorf("renew lock %s: not held by this gateway", name)
	}
	for _, token := range tokens { // the one that holds it, if any
		n, err := renewScript.Run(ctx, r.c, []string{lockKey(name)}, token, lease.Milliseconds()).Int()
		if err != nil {
			return fmt.Errorf("renew lock %s: %w", name, err)
		}
		if n == 1 {
			return nil
		}
	}
	return fmt.Errorf("renew lock %s: lost (it expired and another gateway took it)", name)
}

// String names the storage in certmagic's logs, without the URL (it may
// hold a password).
func (r *Redis) String() string { return "redis acme storage" }

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	_ certmagic.Storage          = (*Redis)(nil)
	_ certmagic.LockLeaseRenewer = (*Redis)(nil)
)
