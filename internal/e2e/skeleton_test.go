// Package e2e runs the product as its users deploy it: a real redis-server,
// relay-backend processes, the wsgate process, and WebSocket clients on
// loopback.
package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// stack is one deployment: redis, relays and a gateway.
type stack struct {
	relays    []*testproc.Proc
	relayAddr []string
	gw        *testproc.Proc
	gwAddr    string
	adminAddr string
}

// startRelays starts n relay-backend processes on redisURL ("" = each on
// its own in-process bus).
func startRelays(t *testing.T, st *stack, n int, redisURL string) {
	t.Helper()
	bin := testproc.Build(t, "./relay-backend")
	for i := range n {
		addr := testproc.FreeAddr(t)
		args := []string{"-listen", addr, "-id", fmt.Sprintf("relay-%d", i+1), "-drain-window", "1s"}
		if redisURL != "" {
			args = append(args, "-redis", redisURL)
		}
		st.relays = append(st.relays, testproc.Start(t, fmt.Sprintf("relay-%d", i+1), bin, args...))
		st.relayAddr = append(st.relayAddr, addr)
	}
	for _, a := range st.relayAddr {
		testproc.WaitHTTP(t, "http://"+a+"/healthz", http.StatusOK, 30*time.Second)
	}
}

// startGateway writes a config and starts wsgate: one pool "relay" of the
// stack's relays (poolExtra goes inside it, after its own keys) routed
// from "/", with extra (more pools and routes) before them.
func startGateway(t *testing.T, st *stack, poolExtra, extra string) {
	t.Helper()
	startGatewayCmd(t, st, poolExtra, extra, nil)
}

// startGatewayCmd is startGateway with prep, when not nil, adjusting the
// command before it starts (a wrapper program, inherited sockets). A
// st.gwAddr already set is the client listener's address.
func startGatewayCmd(t *testing.T, st *stack, poolExtra, extra string, prep func(*exec.Cmd)) {
	t.Helper()
	if st.gwAddr == "" {
		st.gwAddr = testproc.FreeAddr(t)
	}
	st.adminAddr = testproc.FreeAddr(t)
	var nodes strings.Builder
	for _, a := range st.relayAddr {
		fmt.Fprintf(&nodes, "  [[pools.nodes]]\n  addr = %q\n", a)
	}
	cfg := fmt.Sprintf(`[gateway]
listen = %q
drain_window = "2s"
drain_timeout = "15s"

[admin]
listen = %q
%s
[[pools]]
name = "relay"
connect_tries = 2
%s
%s
[[routes]]
path_prefix = "/"
pool = "relay"
`, st.gwAddr, st.adminAddr, extra, poolExtra, nodes.String())
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testproc.Build(t, "./cmd/wsgate"), "-config", path)
	if prep != nil {
		prep(cmd)
	}
	st.gw = testproc.StartCmd(t, "wsgate", cmd)
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)
}

// relayInfo is the part of a relay's /info the tests read.
type relayInfo struct {
	Replica     string `json:"replica"`
	Connections int    `json:"connections"`
	Rooms       int    `json:"rooms"`
}

func getInfo(t *testing.T, addr string) relayInfo {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ri relayInfo
	if err := json.NewDecoder(resp.Body).Decode(&ri); err != nil {
		t.Fatal(err)
	}
	return ri
}

// waitRelaysEmpty polls every relay's /info until it holds no connection and
// no room.
func waitRelaysEmpty(t *testing.T, st *stack) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range st.relayAddr {
		for {
			ri := getInfo(t, a)
			if ri.Connections == 0 && ri.Rooms == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("relay %s still holds %d connections, %d rooms", a, ri.Connections, ri.Rooms)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// client is one WebSocket client with the replica that served it.
type client struct {
	id      int
	room    string
	conn    *websocket.Conn
	replica string
}

type hello struct {
	Type    string `json:"type"`
	Replica string `json:"replica"`
}

// dial connects a client through the gateway to room and reads the relay's
// hello frame.
func dial(t *testing.T, gwAddr string, id int, room string) *client {
	t.Helper()
	url := fmt.Sprintf("ws://%s/room/%s?hello=1", gwAddr, room)
	conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("client %d: dial %s: %v (status %d)", id, url, err, status)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var h hello
	if err := conn.ReadJSON(&h); err != nil || h.Type != "hello" {
		t.Fatalf("client %d: hello: %v %+v", id, err, h)
	}
	return &client{id: id, room: room, conn: conn, replica: h.Replica}
}

// TestSkeleton is the walking skeleton end to end: least-connections split,
// cross-replica fan-out exactly once, a node cap answered with 503, and a
// SIGTERM drain that closes every client with 1001 and leaves the relays
// empty.
func TestSkeleton(t *testing.T) {
	rs := redistest.Start(t)
	st := &stack{}
	startRelays(t, st, 2, rs.URL())
	relay1 := st.relayAddr[0]
	startGateway(t, st, "", fmt.Sprintf(`
[[pools]]
name = "capped"
  [[pools.nodes]]
  addr = %q
  max_conns = 3

[[routes]]
path_prefix = "/room/capped-"
pool = "capped"
`, relay1))

	// 200 clients from one source address, ten rooms of twenty.
	const n, rooms = 200, 10
	clients := make([]*client, n)
	perReplica := map[string]int{}
	for i := range n {
		clients[i] = dial(t, st.gwAddr, i, fmt.Sprintf("e2e-%d", i%rooms))
		perReplica[clients[i].replica]++
	}
	for _, a := range st.relayAddr {
		ri := getInfo(t, a)
		if ri.Connections < n/2-2 || ri.Connections > n/2+2 {
			t.Errorf("relay %s holds %d connections, want %d±2 (split %v)", ri.Replica, ri.Connections, n/2, perReplica)
		}
	}
	t.Logf("split by replica: %v", perReplica)
	mixed := 0
	for r := range rooms {
		seen := map[string]bool{}
		for i := r; i < n; i += rooms {
			seen[clients[i].replica] = true
		}
		if len(seen) > 1 {
			mixed++
		}
	}
	if mixed == 0 {
		t.Fatal("no room has members on both replicas; the cross-replica check would prove nothing")
	}

	checkFanOut(t, clients, rooms)

	// The capped pool takes three, then answers 503 with Retry-After.
	var capped []*client
	for i := range 3 {
		capped = append(capped, dial(t, st.gwAddr, 1000+i, "capped-x"))
	}
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+st.gwAddr+"/room/capped-x", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("4th client of a node capped at 3: err %v, status %d, want 503 with Retry-After", err, status)
	}

	// SIGTERM: every client gets close 1001, within the drain window plus
	// a margin, and the gateway exits 0.
	all := append(clients, capped...)
	start := time.Now()
	if err := st.gw.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	codes := readCloses(all, 30*time.Second)
	took := time.Since(start)
	bad := map[string]int{}
	for _, c := range codes {
		if c != "1001" {
			bad[c]++
		}
	}
	if len(bad) > 0 {
		t.Errorf("close codes other than 1001: %v (of %d clients)", bad, len(all))
	}
	if took > 2*time.Second+10*time.Second {
		t.Errorf("closes took %v; drain_window is 2s", took)
	}
	if code, err := st.gw.Wait(20 * time.Second); err != nil || code != 0 {
		t.Errorf("wsgate exit code %d, err %v; want 0", code, err)
	}
	waitRelaysEmpty(t, st)
	for _, r := range st.relays {
		_ = r.Signal(syscall.SIGTERM)
		if code, err := r.Wait(20 * time.Second); err != nil || code != 0 {
			t.Errorf("%s exit code %d, err %v; want 0", r.Name, code, err)
		}
	}
}

// checkFanOut has every client send one data frame and then a fence frame;
// every member of a room must get each other member's data frame exactly
// once, before that member's fence, and never its own.
func checkFanOut(t *testing.T, clients []*client, rooms int) {
	t.Helper()
	members := len(clients) / rooms
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.receive(members - 1)
		}()
	}
	for _, c := range clients {
		for _, kind := range []string{"data", "fence"} {
			if err := c.conn.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf("%s:%d", kind, c.id))); err != nil {
				t.Fatalf("client %d write: %v", c.id, err)
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// receive reads until it has others fences, checking the data frames.
func (c *client) receive(others int) error {
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	data := map[string]int{}
	fences := map[string]bool{}
	for len(fences) < others {
		_, msg, err := c.conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("client %d: read after %d fences: %w", c.id, len(fences), err)
		}
		kind, from, ok := strings.Cut(string(msg), ":")
		if !ok {
			return fmt.Errorf("client %d: unexpected frame %q", c.id, msg)
		}
		if from == fmt.Sprint(c.id) {
			return fmt.Errorf("client %d: got its own %s frame back", c.id, kind)
		}
		switch kind {
		case "data":
			if fences[from] {
				return fmt.Errorf("client %d: data from %s after its fence (a duplicate)", c.id, from)
			}
			data[from]++
			if data[from] > 1 {
				return fmt.Errorf("client %d: data from %s delivered %d times", c.id, from, data[from])
			}
		case "fence":
			if data[from] != 1 {
				return fmt.Errorf("client %d: fence from %s before its data", c.id, from)
			}
			fences[from] = true
		}
	}
	return nil
}

// readCloses reads every client until its connection ends and returns the
// close code each saw ("1006" for a connection lost without a close frame,
// "frame" when a data frame came instead).
func readCloses(clients []*client, timeout time.Duration) []string {
	codes := make([]string, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
			_, msg, err := c.conn.ReadMessage()
			var ce *websocket.CloseError
			switch {
			case err == nil:
				codes[i] = "frame " + string(msg)
			case errors.As(err, &ce):
				codes[i] = fmt.Sprint(ce.Code)
			default:
				codes[i] = "error " + err.Error()
			}
			c.conn.Close()
		}()
	}
	wg.Wait()
	return codes
}

// TestRelayKilled kills one relay with SIGKILL: its clients get close 1012
// from the gateway (never a bare reset), the other replica's clients keep
// working, and new clients are served by the survivor after the dead node's
// dial fails.
func TestRelayKilled(t *testing.T) {
	rs := redistest.Start(t)
	st := &stack{}
	startRelays(t, st, 2, rs.URL())
	startGateway(t, st, "", "")
	var clients []*client
	for i := range 20 {
		clients = append(clients, dial(t, st.gwAddr, i, "kill"))
	}
	if err := st.relays[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = st.relays[0].Wait(10 * time.Second)

	var victims, survivors []*client
	for _, c := range clients {
		if c.replica == "relay-1" {
			victims = append(victims, c)
		} else {
			survivors = append(survivors, c)
		}
	}
	if len(victims) == 0 || len(survivors) == 0 {
		t.Fatalf("split %d/%d: need clients on both replicas", len(victims), len(survivors))
	}
	for i, code := range readCloses(victims, 20*time.Second) {
		if code != "1012" {
			t.Errorf("client %d on the killed relay saw %s, want 1012", victims[i].id, code)
		}
	}
	// The survivors still talk to each other.
	if err := survivors[0].conn.WriteMessage(websocket.TextMessage, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	for _, c := range survivors[1:] {
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, msg, err := c.conn.ReadMessage(); err != nil || string(msg) != "still here" {
			t.Fatalf("survivor %d: %q %v", c.id, msg, err)
		}
	}
	// New clients land on the survivor.
	for i := range 4 {
		c := dial(t, st.gwAddr, 100+i, "kill")
		if c.replica != "relay-2" {
			t.Fatalf("new client served by %s after relay-1 died", c.replica)
		}
		c.conn.Close()
	}
	for _, c := range survivors {
		c.conn.Close()
	}
}
