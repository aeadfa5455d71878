package acmestore

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

func open(t *testing.T, url string, ttl time.Duration) *Redis {
	t.Helper()
	r, err := Open(url, ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// TestStoreLoadListStatDelete runs the storage's key operations as
// certmagic uses them: values under directory-like paths.
func TestStoreLoadListStatDelete(t *testing.T) {
	srv := redistest.Start(t)
	r := open(t, srv.URL(), 0)
	ctx := context.Background()

	if _, err := r.Load(ctx, "certificates/x/a.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of nothing: %v, want fs.ErrNotExist", err)
	}
	files := map[string][]byte{
		"certificates/ca/a.example/a.example.crt": []byte("cert"),
		"certificates/ca/a.example/a.example.key": []byte("key"),
		"certificates/ca/b.example/b.example.crt": []byte("cert b"),
		"acme/ca/users/ops/ops.json":              {},
	}
	for k, v := range files {
		if err := r.Store(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range files {
		got, err := r.Load(ctx, k)
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("Load(%s) = %q, %v; want %q", k, got, err, v)
		}
	}
	list, err := r.List(ctx, "certificates/ca", false)
	if err != nil || !slices.Equal(list, []string{"certificates/ca/a.example", "certificates/ca/b.example"}) {
		t.Errorf("List non-recursive = %q, %v", list, err)
	}
	list, err = r.List(ctx, "certificates", true)
	if err != nil || len(list) != 3 {
		t.Errorf("List recursive = %q, %v", list, err)
	}
	if _, err := r.List(ctx, "nothing", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List of nothing: %v", err)
	}
	st, err := r.Stat(ctx, "certificates/ca/b.example/b.example.crt")
	if err != nil || !st.IsTerminal || st.Size != 6 || time.Since(st.Modified) > time.Hour || st.Modified.After(time.Now()) {
		t.Errorf("Stat of a value = %+v, %v", st, err)
	}
	st, err = r.Stat(ctx, "certificates/ca")
	if err != nil || st.IsTerminal {
		t.Errorf("Stat of a directory = %+v, %v", st, err)
	}
	if !r.Exists(ctx, "acme/ca/users/ops/ops.json") || !r.Exists(ctx, "acme") || r.Exists(ctx, "acm") {
		t.Error("Exists is wrong about a value, a directory or a prefix that is neither")
	}
	if err := r.Delete(ctx, "certificates/ca/a.example"); err != nil {
		t.Fatal(err)
	}
	if r.Exists(ctx, "certificates/ca/a.example/a.example.key") || !r.Exists(ctx, "certificates/ca/b.example/b.example.crt") {
		t.Error("Delete of a directory removed too little or too much")
	}
	// certmagic.Storage: deleting a key that is not there is no error.
	if err := r.Delete(ctx, "certificates/ca/a.example"); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
	if err := r.Delete(ctx, "certificates/ca/never"); err != nil {
		t.Errorf("Delete of a key never stored: %v, want nil", err)
	}
}

// TestHugeValueRefused plants a value over MaxValue as someone with write
// access to the Redis could: Load refuses it without reading it, and
// Store refuses to write one.
func TestHugeValueRefused(t *testing.T) {
	srv := redistest.Start(t)
	r := open(t, srv.URL(), 0)
	ctx := context.Background()
	huge := bytes.Repeat([]byte("x"), MaxValue+1)
	if err := r.Store(ctx, "k", huge); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Store of %d bytes: %v", len(huge), err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.HSet(ctx, valueKey("certificates/ca/x/x.crt"), "v", huge, "m", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(ctx, "certificates/ca/x/x.crt"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Load of a planted %d-byte value: %v, want ErrTooLarge", len(huge), err)
	}
	if err := r.Store(ctx, "k", huge[:MaxValue]); err != nil {
		t.Errorf("Store of exactly MaxValue: %v", err)
	}
}

// TestLockIsExclusive has gateways (each its own Redis client) take one
// lock many times over: never two at once, and every taker gets it.
func TestLockIsExclusive(t *testing.T) {
	srv := redistest.Start(t)
	var in, max, total atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		r := open(t, srv.URL(), 0)
		wg.Go(func() {
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if err := r.Lock(ctx, "issue_cert_a.example"); err != nil {
					cancel()
					t.Error(err)
					return
				}
				n := in.Add(1)
				if n > max.Load() {
					max.Store(n)
				}
				time.Sleep(time.Millisecond) // hold it across a scheduling point
				in.Add(-1)
				total.Add(1)
				if err := r.Unlock(ctx, "issue_cert_a.example"); err != nil {
					t.Error(err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if max.Load() != 1 || total.Load() != 20 {
		t.Errorf("holders at once: %d (want 1); locks taken: %d (want 20)", max.Load(), total.Load())
	}
}

// TestLockOfDeadHolderExpires has a gateway take a lock and die (its
// client closed, so nothing renews or releases it): another gets the lock
// once the TTL passes, and the dead one's late Unlock does not free the
// new holder's lock.
func TestLockOfDeadHolderExpires(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	dead := open(t, srv.URL(), ttl)
	live := open(t, srv.URL(), ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dead.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	// A holder alive renews past its TTL: the other waits.
	short, cancelShort := context.WithTimeout(ctx, 3*ttl)
	err := live.Lock(short, "l")
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while a live holder renews it: %v, want a timeout", err)
	}
	_ = dead.c.Close() // dies: no renewal, no unlock
	if err := live.Lock(ctx, "l"); err != nil {
		t.Fatalf("Lock after the holder died: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	token := c.Get(ctx, lockKey("l")).Val()
	if err := dead.Unlock(ctx, "l"); err == nil {
		t.Error("the dead holder's Unlock succeeded")
	}
	// What the dead holder's release would send, had its connection
	// lived: compare-and-delete with its old token deletes nothing.
	if n, err := unlockScript.Run(ctx, c, []string{lockKey("l")}, "dead-token").Int(); err != nil || n != 0 {
		t.Errorf("release with a stale token = %d, %v; want 0", n, err)
	}
	if got := c.Get(ctx, lockKey("l")).Val(); got != token || got == "" {
		t.Errorf("lock token after the dead holder's Unlock = %q, want the new holder's %q", got, token)
	}
	if err := live.Unlock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lockKey("l")).Val(); n != 0 {
		t.Error("lock still set after its holder's Unlock")
	}
}

// TestStaleUnlockInProcessKeepsNewHolder pins Unlock with two holders of
// one lock in one process: the first's lock expired (Redis unreachable
// past the TTL, here its key deleted) and a second caller took it. The
// locks were held by name only, so the first's late Unlock released the
// second's lock, with the second's token. Now it releases its own, and the
// second's lock stays until the second's Unlock.
func TestStaleUnlockInProcessKeepsNewHolder(t *testing.T) {
	srv := redistest.Start(t)
	r := open(t, srv.URL(), 5*time.Second)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := r.Lock(ctx, "issue_cert_x"); err != nil { // the first holder
		t.Fatal(err)
	}
	c.Del(ctx, lockKey("issue_cert_x"))                 // its lock expires
	if err := r.Lock(ctx, "issue_cert_x"); err != nil { // the second, same process
		t.Fatal(err)
	}
	second := c.Get(ctx, lockKey("issue_cert_x")).Val()
	if err := r.Unlock(ctx, "issue_cert_x"); err != nil { // the first finishes late
		t.Fatal(err)
	}
	if got := c.Get(ctx, lockKey("issue_cert_x")).Val(); got != second {
		t.Fatalf("after the first holder's Unlock the lock is %q, want the second's %q still held", got, second)
	}
	if err := r.RenewLockLease(ctx, "issue_cert_x", time.Minute); err != nil {
		t.Errorf("the second holder's lease renewal: %v", err)
	}
	if err := r.Unlock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lockKey("issue_cert_x")).Val(); n != 0 {
		t.Error("lock still set after the second holder's Unlock")
	}
	if err := r.Unlock(ctx, "issue_cert_x"); err == nil {
		t.Error("a third Unlock of a lock taken twice succeeded")
	}
}

// TestLostLockLogged pins the renewal of a lock that another holder took
// meanwhile (it expired while Redis was unreachable): the renewal stops,
// and it once stopped without a word. Now a Warn line says so.
func TestLostLockLogged(t *testing.T) {
	srv := redistest.Start(t)
	var buf testproc.Buffer
	r, err := Open(srv.URL(), 300*time.Millisecond, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := r.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, lockKey("l"), "another-holder", time.Minute) // expired and taken
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), "ACME storage lock lost") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the lock lost within 10s; log:\n%s", buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := buf.String(); !strings.Contains(l, `"level":"WARN"`) || !strings.Contains(l, `"lock":"l"`) {
		t.Errorf("lock lost line: %s, want WARN naming the lock", l)
	}
}

// replyDropper relays connections to the Redis at addr, except that the
// first reply to a command naming match (other than a NOSCRIPT error, the
// first try of a script not yet loaded) is never delivered: the client's
// connection is closed once Redis has answered, as when a network fault
// loses a reply. Its Close stops it.
type replyDropper struct {
	ln      net.Listener
	addr    string
	match   []byte
	dropped atomic.Bool
	wg      sync.WaitGroup
}

func newReplyDropper(t *testing.T, addr, match string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &replyDropper{ln: ln, addr: addr, match: []byte(match)}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(func() { ln.Close(); d.wg.Wait() })
	return d
}

func (d *replyDropper) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", d.addr)
		if err != nil {
			c.Close()
			continue
		}
		var armed atomic.Bool
		d.wg.Add(2)
		go func() { // client to Redis: arms the drop on the matching command
			defer d.wg.Done()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 && !d.dropped.Load() && bytes.Contains(buf[:n], d.match) {
					armed.Store(true)
				}
				if n > 0 {
					if _, err := s.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // Redis to client: a reply to the armed command is dropped
			defer d.wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && armed.Load() && !bytes.HasPrefix(buf[:n], []byte("-NOSCRIPT")) && d.dropped.CompareAndSwap(false, true) {
					return // the reply goes nowhere; the connection breaks
				}
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestLockTakenDespiteLostReply pins lock acquisition across a lost reply:
// the reply to the command that set the lock is lost, the client tries
// again, and the lock is held at once. Before, the retry's SET NX found
// the key (set by the first try, with this very token) and Lock waited
// for its TTL to pass, with a lock nobody would release.
func TestLockTakenDespiteLostReply(t *testing.T) {
	srv := redistest.Start(t)
	d := newReplyDropper(t, srv.Addr, lockKey("lost"))
	r := open(t, "redis://"+d.ln.Addr().String()+"/0", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Lock(ctx, "lost"); err != nil {
		t.Fatalf("Lock after its reply was lost: %v (the lock's TTL is a minute)", err)
	}
	if !d.dropped.Load() {
		t.Fatal("no reply was dropped: the test did not test")
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if got := c.Get(ctx, lockKey("lost")).Val(); !strings.HasPrefix(got, r.owner+":") {
		t.Fatalf("lock token %q, want this holder's", got)
	}
	if err := r.Unlock(ctx, "lost"); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lockKey("lost")).Val(); n != 0 {
		t.Error("lock still set after Unlock")
	}
}

// TestScriptsDeclareTheirKeys pins that every Lua script of the storage
// names, as the key of each Redis command it calls, one of its KEYS, as
// Redis requires of a script (a script that builds key names from its
// arguments reaches keys no client or proxy can route or check). Before,
// the delete script built the value keys it deleted from ARGV.
func TestScriptsDeclareTheirKeys(t *testing.T) {
	src, err := os.ReadFile("redis.go")
	if err != nil {
		t.Fatal(err)
	}
	scripts := regexp.MustCompile("(?s)redis\\.NewScript\\(`(.*?)`\\)").FindAllSubmatch(src, -1)
	if len(scripts) < 5 {
		t.Fatalf("found %d scripts in redis.go, want at least 5", len(scripts))
	}
	call := regexp.MustCompile(`redis\.call\('(\w+)',\s*([^,)]+)`)
	for _, s := range scripts {
		for _, c := range call.FindAllSubmatch(s[1], -1) {
			if !bytes.HasPrefix(c[2], []byte("KEYS[")) {
				t.Errorf("script calls %s on %s, not one of its KEYS:\n%s", c[1], c[2], s[1])
			}
		}
	}
}
