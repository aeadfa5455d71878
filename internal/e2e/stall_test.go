package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
)

// setDrain rewrites the drain keys of a config written by gatewayConfig,
// and gives its health checks room for a loaded machine.
func setDrain(t *testing.T, path, window, timeout string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), `drain_window = "2s"`, fmt.Sprintf("drain_window = %q", window), 1)
	s = strings.Replace(s, `drain_timeout = "15s"`, fmt.Sprintf("drain_timeout = %q", timeout), 1)
	// Probes every 100 ms with an 80 ms timeout mark a node down after
	// three slow answers, which a loaded test machine gives; this test is
	// not about health, so a node stays up unless it really is down.
	s = strings.Replace(s, "interval = \"100ms\"\n  timeout = \"80ms\"\n", "interval = \"1s\"\n  timeout = \"1s\"\n  fall = 10\n", 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dialSmallWindow opens a TCP connection to addr whose receive buffer is
// set to 4 KB before the connect, so the window it advertises stays small.
func dialSmallWindow(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	return d.Dial("tcp", addr)
}

// scraper fetches /metrics and /api/nodes in turn every 100 ms, as a
// Prometheus server and the dashboard do, and keeps each answer's latency
// or error.
type scraper struct {
	mu        sync.Mutex
	latencies []time.Duration
	failures  []string
	stop      chan struct{}
	done      chan struct{}
}

func startScraper(adminAddr string) *scraper {
	s := &scraper{stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 100_000; i++ {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			url := "http://" + adminAddr + []string{"/metrics", "/api/nodes"}[i%2]
			start := time.Now()
			resp, err := hc.Get(url)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			took := time.Since(start)
			s.mu.Lock()
			if err != nil {
				s.failures = append(s.failures, fmt.Sprintf("%s after %v: %v", url, took.Round(time.Millisecond), err))
			} else {
				s.latencies = append(s.latencies, took)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// results stops the scraper and returns its latencies, sorted, and failures.
func (s *scraper) results() ([]time.Duration, []string) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	slices.Sort(s.latencies)
	return s.latencies, s.failures
}

// pairTalk dials client i of a pair in room, reads the relay's hello (a
// frame from the node), sends one message and reads its partner's (frames
// both ways through the tunnel). It returns the connection on success.
func pairTalk(gwAddr string, i int, room string) (*websocket.Conn, error) {
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial(fmt.Sprintf("ws://%s/room/%s?hello=1", gwAddr, room), nil)
	if err != nil {
		return nil, fmt.Errorf("client %d: dial: %w", i, err)
	}
	fail := func(what string, err error) (*websocket.Conn, error) {
		conn.Close()
		return nil, fmt.Errorf("client %d: %s: %w", i, what, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var h hello
	if err := conn.ReadJSON(&h); err != nil || h.Type != "hello" {
		return fail("hello", fmt.Errorf("%v %+v", err, h))
	}
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := conn.WriteMessage(websocket.TextMessage, []byte(fmt.Sprint("from-", i))); err != nil {
		return fail("write", err)
	}
	want := fmt.Sprint("from-", i^1)
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			return fail("read partner", err)
		}
		if string(msg) == want {
			return conn, nil
		}
	}
}

// TestStuckReaderStallsNothing pins the critical stall of issue 9: a client
// that joined a busy room with a small receive window and never read left
// the tunnel's forward blocked, holding its lock, in a write with no
// deadline; the next scrape then held the registry lock waiting for it, so
// scrapes hung, every later client got its 101 but no tunnel, and SIGTERM
// hung past drain_timeout. With such a client stuck in a room that gets
// 300 messages of 60 KB, scrapes every 100 ms must answer, 100 new clients
// must each get frames through their tunnel both ways, and the gateway must
// exit within drain_timeout + 1 s of SIGTERM.
func TestStuckReaderStallsNothing(t *testing.T) {
	const drainTimeout = 3 * time.Second
	// A race-enabled binary sleeps a second at exit by default, which
	// the exit time below is not about.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	st := &stack{}
	startRelays(t, st, 1, "")
	cfg := gatewayConfig(t, st)
	setDrain(t, cfg, "1s", drainTimeout.String())
	st.gw = testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg)
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)

	// The stuck reader: upgrade, then never read a byte.
	raw, err := dialSmallWindow(st.gwAddr)
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := rawUpgrade(raw, st.gwAddr, "/room/busy")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()

	// The room gets busy: 300 messages of 60 KB, far more than the stuck
	// reader's window and every buffer between.
	pub := dial(t, st.gwAddr, -1, "busy")
	defer pub.conn.Close()
	msg := make([]byte, 60<<10)
	for i := range 300 {
		_ = pub.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := pub.conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	sc := startScraper(st.adminAddr)
	const n = 100
	conns := make([]*websocket.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = pairTalk(st.gwAddr, i, fmt.Sprint("fresh-", i/2))
		}()
	}
	wg.Wait()
	// Twenty scrapes at least, some after the last handshake; a scrape
	// that hangs counts as failed after its 5 s timeout.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		sc.mu.Lock()
		enough := len(sc.latencies)+len(sc.failures) >= 20
		sc.mu.Unlock()
		if enough {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	lat, failures := sc.results()

	ok := 0
	for i, err := range errs {
		if err != nil {
			if ok+i < 5 || i == n-1 {
				t.Log(err)
			}
			continue
		}
		ok++
		// Read on, so the client answers the drain's close.
		go func(c *websocket.Conn) {
			for j := 0; j < 100_000; j++ {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}(conns[i])
		defer conns[i].Close()
	}
	go func() {
		for j := 0; j < 100_000; j++ {
			if _, _, err := pub.conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	var median, maxLat time.Duration
	if len(lat) > 0 {
		median, maxLat = lat[len(lat)/2], lat[len(lat)-1]
	}
	t.Logf("tunnels carrying frames: %d of %d; scrapes answered: %d (median %v, max %v), failed: %d",
		ok, n, len(lat), median.Round(time.Microsecond), maxLat.Round(time.Microsecond), len(failures))
	if ok != n {
		t.Errorf("%d of %d new tunnels carried frames both ways", ok, n)
	}
	if len(failures) > 0 {
		t.Errorf("%d scrapes failed, first: %s", len(failures), failures[0])
	}
	if len(lat)+len(failures) < 20 {
		t.Errorf("only %d scrapes finished in 20 s", len(lat)+len(failures))
	}

	start := time.Now()
	if err := st.gw.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := st.gw.Wait(drainTimeout + 20*time.Second)
	took := time.Since(start)
	t.Logf("wsgate exited %v after SIGTERM (drain_timeout %v), code %d", took.Round(time.Millisecond), drainTimeout, code)
	if err != nil || code != 0 {
		t.Errorf("wsgate exit code %d, err %v; want 0", code, err)
	}
	if took > drainTimeout+time.Second {
		t.Errorf("wsgate took %v to exit after SIGTERM, want at most drain_timeout + 1s = %v", took, drainTimeout+time.Second)
	}
}
