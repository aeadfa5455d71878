package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
)

// reloadable starts a gateway whose config lives in a file, so tests can
// rewrite it and reload. cfgFmt is as for newEnv.
func reloadable(t *testing.T, relays int, cfgFmt string) (*env, string) {
	e := newEnv(t, relays, cfgFmt)
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	e.writeConfig(path, cfgFmt)
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	return e, path
}

// writeConfig renders cfgFmt for this env (the running gateway's own
// address first) into path.
func (e *env) writeConfig(path, cfgFmt string) {
	e.t.Helper()
	args := []any{e.gw}
	for _, a := range e.addrs {
		args = append(args, a)
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf(cfgFmt, args...)), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

const reloadBase = `
[gateway]
listen = %[1]q
drain_window = "3s"
drain_timeout = "10s"
[admin]
listen = "127.0.0.1:0"
[[pools]]
name = "relay"
max_conns_per_node = 5000
  [pools.health]
  interval = "50ms"
  timeout = "40ms"
  rise = 1
  [[pools.nodes]]
  addr = %[2]q
  [[pools.nodes]]
  addr = %[3]q
[[routes]]
path_prefix = "/room/"
pool = "relay"
`

// pair is two clients in one room: a sends numbered frames, b checks them.
type pair struct {
	a, b   *websocket.Conn
	sent   atomic.Uint64
	got    atomic.Uint64
	closed atomic.Bool
	err    atomic.Value // string
}

// TestReloadKeepsTunnels holds 2,000 tunnels with numbered frames flowing
// through two reloads (one adds a route and a node, one changes a cap) and
// checks no tunnel closed and every frame arrived once, in order.
func TestReloadKeepsTunnels(t *testing.T) {
	const pairs = 1000
	e, path := reloadable(t, 3, reloadBase+"# %[4]s\n")
	e.writeConfig(path, reloadBase+"# %[4]s\n")
	ps := make([]*pair, pairs)
	var readers sync.WaitGroup
	for i := range ps {
		room := fmt.Sprintf("/room/keep-%d", i)
		p := &pair{a: e.mustDial(room), b: e.mustDial(room)}
		ps[i] = p
		readers.Add(1)
		go p.check(&readers)
	}
	// A tunnel is registered just after its 101 went out: wait for all.
	waitUntil(t, func() bool { return e.srv.Tunnels() == 2*pairs })
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for _, p := range ps[:100] {
		senders.Add(1)
		go p.send(stop, &senders)
	}
	waitUntil(t, func() bool { return sentTotal(ps) > 2000 })

	// Reload 1: a new route and a third node.
	withNode := strings.Replace(reloadBase, "[[routes]]", "  [[pools.nodes]]\n  addr = %[4]q\n[[routes]]\npath_prefix = \"/other/\"\npool = \"relay\"\n[[routes]]", 1)
	e.writeConfig(path, withNode)
	if err := e.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	mark := sentTotal(ps)
	waitUntil(t, func() bool { return sentTotal(ps) > mark+2000 })
	// Reload 2: a lower cap on every node.
	e.writeConfig(path, strings.Replace(withNode, "max_conns_per_node = 5000", "max_conns_per_node = 4000", 1))
	if err := e.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	mark = sentTotal(ps)
	waitUntil(t, func() bool { return sentTotal(ps) > mark+2000 })
	close(stop)
	senders.Wait()

	if g := e.srv.current(); g.n != 4 || g.pools["relay"].Node(e.addrs[0]).MaxConns() != 4000 {
		t.Fatalf("generation %d, cap %d", g.n, g.pools["relay"].Node(e.addrs[0]).MaxConns())
	}
	// Every receiver gets everything its sender sent, then the tunnels
	// are still all there.
	waitUntil(t, func() bool {
		for _, p := range ps {
			if p.got.Load() != p.sent.Load() {
				return false
			}
		}
		return true
	})
	for i, p := range ps {
		if msg, _ := p.err.Load().(string); msg != "" {
			t.Fatalf("pair %d: %s", i, msg)
		}
		if p.closed.Load() {
			t.Fatalf("pair %d: a tunnel closed during the reloads", i)
		}
	}
	if n := e.srv.Tunnels(); n != 2*pairs {
		t.Fatalf("tunnels %d after the reloads, want %d", n, 2*pairs)
	}
	t.Logf("frames checked: %d over %d tunnels", sentTotal(ps), 2*pairs)
	for _, p := range ps {
		p.a.Close()
		p.b.Close()
	}
	readers.Wait()
	e.waitZero()
}

func sentTotal(ps []*pair) uint64 {
	var n uint64
	for _, p := range ps {
		n += p.sent.Load()
	}
	return n
}

// send writes numbered frames every 10ms until stop.
func (p *pair) send(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var b [8]byte
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		binary.BigEndian.PutUint64(b[:], p.sent.Load()+1)
		if err := p.a.WriteMessage(websocket.BinaryMessage, b[:]); err != nil {
			p.err.Store("send: " + err.Error())
			return
		}
		p.sent.Add(1)
	}
}

// check reads b until it closes, requiring 1, 2, 3, ...
func (p *pair) check(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		_, msg, err := p.b.ReadMessage()
		if err != nil {
			if websocket.IsCloseError(err, 1001, 1012, 1013) {
				p.closed.Store(true)
			}
			return
		}
		seq := binary.BigEndian.Uint64(msg)
		if want := p.got.Load() + 1; seq != want {
			p.err.Store(fmt.Sprintf("got frame %d, want %d (lost or duplicated)", seq, want))
		}
		p.got.Store(seq)
	}
}

// TestReloadRemovingNode removes one of three nodes: exactly its clients
// get 1001, spread over the drain window with no burst above twice the
// even rate, and they reconnect to the other nodes.
func TestReloadRemovingNode(t *testing.T) {
	three := strings.Replace(reloadBase, "[[routes]]", "  [[pools.nodes]]\n  addr = %[4]q\n[[routes]]", 1)
	e, path := reloadable(t, 3, three)
	type cl struct {
		c    *websocket.Conn
		node string
	}
	var cls []cl
	for i := range 60 {
		c := e.mustDial(fmt.Sprintf("/room/rm%d?hello=1", i))
		var h struct{ Replica string }
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.ReadJSON(&h); err != nil {
			t.Fatal(err)
		}
		cls = append(cls, cl{c, h.Replica})
	}
	two := strings.Replace(three, "  [[pools.nodes]]\n  addr = %[4]q\n", "", 1)
	e.writeConfig(path, two)
	start := time.Now()
	if err := e.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var closes []time.Duration
	var wrong []string
	var victims, others sync.WaitGroup
	for _, x := range cls {
		wg := &others
		if x.node == "relay-3" {
			wg = &victims
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = x.c.SetReadDeadline(time.Now().Add(8 * time.Second))
			_, _, err := x.c.ReadMessage()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case x.node == "relay-3" && websocket.IsCloseError(err, 1001):
				closes = append(closes, time.Since(start))
			case x.node == "relay-3":
				wrong = append(wrong, fmt.Sprintf("client of the removed node: %v", err))
			case err == nil || websocket.IsCloseError(err, 1000, 1001, 1006, 1012):
				wrong = append(wrong, fmt.Sprintf("client of %s was closed: %v", x.node, err))
			}
		}()
	}
	victims.Wait()
	// The others were not closed: end their reads now.
	for _, x := range cls {
		if x.node != "relay-3" {
			_ = x.c.SetReadDeadline(time.Now())
		}
	}
	others.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d wrong: %v", len(wrong), wrong)
	}
	if len(closes) < 15 {
		t.Fatalf("only %d clients were on the removed node", len(closes))
	}
	buckets := make([]int, 4)
	for _, d := range closes {
		buckets[min(int(d/time.Second), 3)]++
	}
	even := float64(len(closes)) / 3 // per second over the 3s window
	for i, n := range buckets {
		if float64(n) > 2*even {
			t.Errorf("second %d had %d closes, over twice the even %.1f/s (buckets %v)", i, n, even, buckets)
		}
	}
	t.Logf("%d closes by second: %v", len(closes), buckets)
	for range closes {
		c := e.mustDial("/room/again?hello=1")
		var h struct{ Replica string }
		if err := c.ReadJSON(&h); err != nil || h.Replica == "relay-3" {
			t.Fatalf("reconnected to %q (%v)", h.Replica, err)
		}
		c.Close()
	}
	for _, x := range cls {
		x.c.Close()
	}
	e.waitZero()
	// The removed node is remembered as leaving only while it has
	// tunnels: once its last one has ended it is forgotten, without
	// waiting for another reload.
	waitUntil(t, func() bool { return e.srv.tunnels.RetiredLen() == 0 })
}

// TestBrokenReloadKeepsServing feeds broken files to a running gateway:
// each is refused with the line and key, counted, shown by the admin API,
// and the old config keeps serving.
func TestBrokenReloadKeepsServing(t *testing.T) {
	e, path := reloadable(t, 2, reloadBase)
	for _, name := range []string{"syntax", "unknown_node_key", "missing_pool", "negative_node_cap"} {
		t.Run(name, func(t *testing.T) {
			fixture := filepath.Join("..", "testdata", "conf", "invalid", name+".toml")
			golden, err := os.ReadFile(strings.TrimSuffix(fixture, ".toml") + ".golden")
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(fixture)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			code, body := e.admin(http.MethodPost, "/api/reload", "")
			want := strings.TrimPrefix(strings.TrimSpace(string(golden)), name+".toml")
			if code != 400 || !strings.Contains(string(body), jsonEscape(want)) {
				t.Fatalf("POST /api/reload: %d %s\nwant 400 with %q", code, body, want)
			}
			if st := e.srv.LastReload(); st.OK || !strings.Contains(st.Error, path) {
				t.Fatalf("last reload %+v: want an error naming %s", st, path)
			}
			c := e.mustDial("/room/still")
			c.Close()
		})
	}
	if g := e.srv.current(); g.n != 2 {
		t.Fatalf("generation %d after only broken reloads, want 2", g.n)
	}
	if v := counter(e.scrape(), "wsgate_reloads_total", "result", "error"); v != 4 {
		t.Fatalf("reload errors counted %v, want 4", v)
	}
	e.waitZero()
}

func jsonEscape(s string) string {
	return strings.NewReplacer(`"`, `\"`, "\n", `\n`).Replace(s)
}

// TestReloadWatchAndLatency rewrites the config the way editors do (a new
// file renamed over the old) and measures the time until the new
// generation is active.
func TestReloadWatchAndLatency(t *testing.T) {
	e, path := reloadable(t, 2, reloadBase)
	ctx := t.Context()
	if err := conf.Watch(ctx, path, 0, func() { _ = e.srv.Reload() }); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	e.writeConfig(tmp, strings.Replace(reloadBase, "max_conns_per_node = 5000", "max_conns_per_node = 4999", 1))
	start := time.Now()
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return e.srv.current().n == 3 })
	t.Logf("file renamed -> new generation active in %v (settle %v)", time.Since(start), conf.DefaultSettle)
	if got := e.srv.current().pools["relay"].Node(e.addrs[0]).MaxConns(); got != 4999 {
		t.Fatalf("cap %d after the watched reload", got)
	}
}

// TestReloadStatusBeforeFirstReload pins what GET /api/reload says before
// any reload: {"result": "none"} and the generation in force. It used to
// be a zero status, {"at": "0001-01-01...", "ok": false}, which read as a
// failed reload.
func TestReloadStatusBeforeFirstReload(t *testing.T) {
	e := newEnv(t, 1, withAdminListen(oneNode))
	get := func() map[string]any {
		t.Helper()
		code, body := e.admin(http.MethodGet, "/api/reload", "")
		var v map[string]any
		if err := json.Unmarshal(body, &v); code != 200 || err != nil {
			t.Fatalf("GET /api/reload: %d %s (%v)", code, body, err)
		}
		return v
	}
	v := get()
	if v["result"] != "none" || v["generation"] != 1.0 || v["message"] == nil || len(v) != 3 {
		t.Fatalf("before any reload: %v, want result none, generation 1 and a message only", v)
	}
	// The config came from no file, so a reload fails: now there is one
	// to report.
	if code, body := e.admin(http.MethodPost, "/api/reload", ""); code != 400 {
		t.Fatalf("POST /api/reload: %d %s, want 400", code, body)
	}
	v = get()
	if v["result"] != "error" || v["ok"] != false || v["error"] == nil || v["at"] == nil {
		t.Fatalf("after a failed reload: %v, want result error, ok false, the error and its time", v)
	}
}

// TestReloadWatchesConfigMapSwap mounts the config as a Kubernetes
// ConfigMap volume does (wsgate.toml -> ..data/wsgate.toml, ..data -> a
// timestamped directory) and updates it as the kubelet does: a new
// directory, a ..data_tmp symlink to it renamed over ..data, the old
// directory removed. It pins the watcher's name filter, which dropped
// every event of that swap, so the new config was never loaded.
func TestReloadWatchesConfigMapSwap(t *testing.T) {
	e, _ := reloadable(t, 2, reloadBase)
	dir := t.TempDir()
	path := filepath.Join(dir, "wsgate.toml")
	for i, cfg := range []string{reloadBase, strings.Replace(reloadBase, "max_conns_per_node = 5000", "max_conns_per_node = 4999", 1)} {
		ts := fmt.Sprintf("..2026_11_30_09_0%d_00.000000001", i)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		e.writeConfig(filepath.Join(dir, ts, "wsgate.toml"), cfg)
		if i == 0 {
			if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join("..data", "wsgate.toml"), path); err != nil {
				t.Fatal(err)
			}
			if err := e.srv.ReloadFrom(path); err != nil {
				t.Fatal(err)
			}
			if err := conf.Watch(t.Context(), path, 0, func() { _ = e.srv.Reload() }); err != nil {
				t.Fatal(err)
			}
			continue
		}
		gen := e.srv.current().n
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, "..2026_11_30_09_00_00.000000001")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool { return e.srv.current().n > gen })
	}
	if got := e.srv.current().pools["relay"].Node(e.addrs[0]).MaxConns(); got != 4999 {
		t.Fatalf("cap %d after the ConfigMap update, want 4999", got)
	}
}

// TestListenersKeepTheirAddressAfterReload pins the hand-over map of a
// restart after a reload that changed gateway.listen and admin.listen:
// the reload cannot move the sockets, and Listeners used to name them by
// the new config, so the next process was handed the old socket under the
// new address and served it instead of opening the new one.
func TestListenersKeepTheirAddressAfterReload(t *testing.T) {
	const cfgFmt = `
[gateway]
listen = %q
[admin]
listen = %q
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:9"
[[routes]]
pool = "relay"
`
	oldGW, oldAdmin := testproc.FreeAddr(t), testproc.FreeAddr(t)
	newGW, newAdmin := testproc.FreeAddr(t), testproc.FreeAddr(t)
	parse := func(gw, admin string) *conf.Config {
		t.Helper()
		cfg, err := conf.Parse("listen.toml", []byte(fmt.Sprintf(cfgFmt, gw, admin)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	srv, err := New(parse(oldGW, oldAdmin), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	if err := srv.Apply(parse(newGW, newAdmin)); err != nil {
		t.Fatal(err)
	}
	if r := srv.LastReload().Restart; len(r) < 2 {
		t.Fatalf("reload changing both listen addresses reported %v as needing a restart", r)
	}
	got := srv.Listeners()
	if len(got) != 2 {
		t.Fatalf("hand-over map has %d entries, want 2: %v", len(got), got)
	}
	for _, a := range []string{oldGW, oldAdmin} {
		ln := got[a]
		if ln == nil {
			t.Fatalf("no listener handed over under %s (the address it was opened for): %v", a, got)
		}
		if ln.Addr().String() != a {
			t.Fatalf("listener handed over as %s listens on %s", a, ln.Addr())
		}
	}
}

// TestReaddedNodeKeepsItsCount pins a cap overshoot: a reload removed a
// node while leases on it were held, a later reload named its address
// again, and the pool got a fresh node at zero live, so the address took
// its cap again on top of the tunnels still open to it. The node is now
// the same until its last lease ends: the cap holds across the removal,
// the node is no longer leaving once back (its new tunnels stay), and
// once released and removed again it is forgotten.
func TestReaddedNodeKeepsItsCount(t *testing.T) {
	const withX = `
[gateway]
listen = %[1]q
[admin]
listen = ""
[[pools]]
name = "relay"
  [pools.health]
  interval = "50ms"
  timeout = "40ms"
  rise = 1
  [[pools.nodes]]
  addr = %[2]q
  max_conns = 2
  [[pools.nodes]]
  addr = %[3]q
  max_conns = 1
[[routes]]
path_prefix = "/room/"
pool = "relay"
`
	withoutX := strings.Replace(withX, "  [[pools.nodes]]\n  addr = %[2]q\n  max_conns = 2\n", "", 1)
	e, path := reloadable(t, 2, withX)
	nodeX := func() *balancer.Node { return e.srv.current().pools["relay"].Node(e.addrs[0]) }
	x := nodeX()
	reload := func(cfgFmt string) {
		t.Helper()
		e.writeConfig(path, cfgFmt)
		if err := e.srv.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	// The other node holds its one slot, so every handshake goes to x.
	other := e.srv.current().pools["relay"].Node(e.addrs[1])
	held := takeLeases(t, other, 1)
	// Two tunnels' worth of leases on x (its cap), then x leaves the config.
	held = append(held, takeLeases(t, x, 2)...)
	defer releaseAll(held)
	reload(withoutX)
	reload(withX)
	if nodeX() != x {
		t.Fatalf("address named again while it had %d leases: a new node (live %d)", x.Live(), nodeX().Live())
	}
	waitUntil(t, func() bool { return x.State() == balancer.StateUp })
	if _, resp, err := e.dial("/room/r", nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("handshake with x at its cap across the removal: %v %v, want 503", err, resp)
	}
	held[2].Release() // one of x's old tunnels ends
	c := e.mustDial("/room/r")
	defer c.Close()
	if x.Live() != 2 {
		t.Fatalf("x live %d after a new tunnel, want 2", x.Live())
	}
	if e.srv.tunnels.Leaving(x) {
		t.Fatal("x is back in the config but still marked leaving: its new tunnels would be closed")
	}
	if _, resp, err := e.dial("/room/r", nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third tunnel to x with a cap of 2: %v %v, want 503", err, resp)
	}
	c.Close()
	releaseAll(held)
	waitUntil(t, func() bool { return x.Live() == 0 })
	// Released and removed, x is forgotten by the reload after the one
	// that removed it; the address then starts afresh.
	reload(withoutX)
	reload(withoutX)
	if n := e.srv.current().nodes.Len(); n != 1 {
		t.Fatalf("node registry holds %d nodes with x gone and idle, want 1", n)
	}
	reload(withX)
	if nodeX() == x || nodeX().Live() != 0 {
		t.Fatalf("x named again after it was forgotten: same node %v, live %d", nodeX() == x, nodeX().Live())
	}
}

// takeLeases takes k leases on n directly, as k tunnels would.
func takeLeases(t *testing.T, n *balancer.Node, k int) []*balancer.Lease {
	t.Helper()
	var ls []*balancer.Lease
	for range k {
		l, ok := n.TryAcquire()
		if !ok {
			t.Fatalf("node %s full at live %d", n.Addr(), n.Live())
		}
		ls = append(ls, l)
	}
	return ls
}

func releaseAll(ls []*balancer.Lease) {
	for _, l := range ls {
		l.Release()
	}
}

// TestReloadSaysWhatNeedsRestart pins that a reload reports a change of
// [log] format and gateway.pollers as needing a restart (the logger and
// the pollers are made once, at start) and applies [log] access and
// gateway.tunnel_engine (next tunnel) without one.
func TestReloadSaysWhatNeedsRestart(t *testing.T) {
	parse := func(log string) *conf.Config {
		t.Helper()
		cfg, err := conf.Parse("t.toml", []byte(log+`
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"
[[routes]]
pool = "relay"
`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old := parse("[log]\nformat = \"text\"\n")
	if got := needsRestart(old, parse("[log]\nformat = \"json\"\n")); !slices.Contains(got, "log.format") {
		t.Errorf("format text to json: needs restart %v, want log.format", got)
	}
	if got := needsRestart(old, parse("[log]\naccess = true\n")); len(got) != 0 {
		t.Errorf("access on: needs restart %v, want nothing", got)
	}
	if got := needsRestart(old, parse("[gateway]\npollers = 1\n[log]\nformat = \"text\"\n")); !slices.Contains(got, "gateway.pollers") {
		t.Errorf("pollers 0 to 1: needs restart %v, want gateway.pollers", got)
	}
	if got := needsRestart(old, parse("[gateway]\ntunnel_engine = \"goroutines\"\n[log]\nformat = \"text\"\n")); len(got) != 0 {
		t.Errorf("tunnel_engine: needs restart %v, want nothing (it applies to new tunnels)", got)
	}
}

// TestReloadLockFreeWhilePluginsStart pins the reload's two locks: while a
// reload waits for an auth plugin to start, the config in force keeps
// serving, and what waits on the reload lock (the admin API's reload
// status, a discovery change, the TLS watcher) does not wait for the
// plugin. The plugin here starts only once the test lets it.
func TestReloadLockFreeWhilePluginsStart(t *testing.T) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	plugin := testproc.Build(t, "./plugins/internal/testplugin")
	e, path := reloadable(t, 2, reloadBase)
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	withPlugin := reloadBase + fmt.Sprintf("[[plugins]]\nname = \"slow\"\npath = %q\n  [plugins.config]\n  started_file = %q\n  release_file = %q\n",
		plugin, started, release)
	e.writeConfig(path, withPlugin)
	before := e.srv.LastReload().Generation

	done := make(chan error, 1)
	go func() { done <- e.srv.Reload() }()
	waitUntil(t, func() bool { _, err := os.Stat(started); return err == nil })

	// The plugin is starting: the reload lock is free, and the config in
	// force serves.
	if got := e.srv.LastReload().Generation; got != before {
		t.Fatalf("generation %d while the reload waits for its plugin, want %d", got, before)
	}
	c := e.mustDial("/room/r")
	c.Close()
	select {
	case err := <-done:
		t.Fatalf("the reload ended (%v) before its plugin was let start", err)
	default:
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := e.srv.LastReload().Generation; got != before+1 {
		t.Fatalf("generation %d after the reload, want %d", got, before+1)
	}
}

// TestReloadReadsTLSFilesOutsideTheLock pins where a reload reads its TLS
// files: before it takes the lock that discovery, the TLS watcher and the
// admin API's reload status wait on. The reloaded config's certificate
// is a named pipe, so the reading waits until the test writes it.
func TestReloadReadsTLSFilesOutsideTheLock(t *testing.T) {
	f := newTLSFiles(t)
	tlsAddr := testproc.FreeAddr(t)
	e := newEnv(t, 1, tlsGatewayConfig("", f.table(tlsAddr, ""), catchAll))
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	e.writeConfig(path, tlsGatewayConfig("", f.table(tlsAddr, ""), catchAll))
	if err := e.srv.ReloadFrom(path); err != nil {
		t.Fatal(err)
	}
	before := e.srv.LastReload().Generation

	next, err := f.ca.Server("gw.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pipeDir := t.TempDir()
	pipe, key := filepath.Join(pipeDir, "next.crt"), filepath.Join(pipeDir, "next.key")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Skipf("no named pipe here: %v", err)
	}
	if err := os.WriteFile(key, next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	g := *f
	g.certs = [][2]string{{pipe, key}}
	e.writeConfig(path, tlsGatewayConfig("", g.table(tlsAddr, ""), catchAll))

	done := make(chan error, 1)
	go func() { done <- e.srv.ReloadFrom(path) }()
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(pipe, os.O_WRONLY, 0) // returns once the reload opens it to read
		if err != nil {
			t.Error(err)
		}
		opened <- w
	}()
	var w *os.File
	select {
	case w = <-opened:
	case err := <-done:
		t.Fatalf("the reload ended (%v) without reading the certificate", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the reload never opened the certificate")
	}
	if w == nil {
		t.FailNow()
	}
	// The reload is reading the certificate: the lock is free.
	status := make(chan uint64, 1)
	go func() { status <- e.srv.LastReload().Generation }()
	select {
	case got := <-status:
		if got != before {
			t.Errorf("generation %d while the reload reads its files, want %d", got, before)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reload status waited for the reload's TLS files")
	}
	if _, err := w.Write(next.CertPEM); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := e.srv.LastReload().Generation; got != before+1 {
		t.Fatalf("generation %d after the reload, want %d", got, before+1)
	}
	if !bytes.Equal(servedLeaf(t, e.srv.TLSAddr().String(), "gw.test"), next.Cert.Raw) {
		t.Fatal("the reloaded certificate is not served")
	}
}
