package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fasthttp/websocket"
)

// threeNodesWith is a newEnv config with three relay nodes in pool "relay"
// and pool lines added.
func threeNodesWith(pool string) string {
	return "[gateway]\nlisten = %[1]q\ndrain_window = \"200ms\"\n[admin]\nlisten = \"\"\n" +
		"[[pools]]\nname = \"relay\"\n" + pool +
		"\n  [[pools.nodes]]\n  addr = %[2]q\n  [[pools.nodes]]\n  addr = %[3]q\n  [[pools.nodes]]\n  addr = %[4]q\n" +
		"[[routes]]\npool = \"relay\"\n"
}

// lives returns the live lease count of each node of pool "relay", by
// address.
func (e *env) lives() map[string]int {
	out := map[string]int{}
	for _, n := range e.srv.current().pools["relay"].Balancer.Nodes() {
		out[n.Addr()] = n.Live()
	}
	return out
}

// dialLands opens a WebSocket on path and returns it with the node whose
// live count it raised (the gateway takes the lease before the 101).
func (e *env) dialLands(path string, h http.Header) (*websocket.Conn, string) {
	e.t.Helper()
	before := e.lives()
	c, _, err := e.dial(path, h)
	if err != nil {
		e.t.Fatalf("dial %s: %v", path, err)
	}
	for addr, n := range e.lives() {
		if n == before[addr]+1 {
			return c, addr
		}
	}
	e.t.Fatalf("dial %s: no node gained a lease (before %v, after %v)", path, before, e.lives())
	return nil, ""
}

// closeAndWait closes c and waits until its node's lease is released.
func (e *env) closeAndWait(c *websocket.Conn, addr string, want int) {
	e.t.Helper()
	c.Close()
	waitUntil(e.t, func() bool { return e.lives()[addr] == want })
}

// TestHashPoolKeepsRoomsTogether checks balance = "hash" through real
// sockets: two clients with one key (query:room) land on one node, a key
// found to rank first elsewhere lands there again when dialled again, a
// request without the key goes to the least-loaded node, and a plain
// request with a key goes to that key's node.
func TestHashPoolKeepsRoomsTogether(t *testing.T) {
	// A loose bound, so the second client of a room is within it
	// (with 0.25 over three nodes, a second lease on one node is past
	// ceil(1.25 × 2 / 3) = 1 and would move on, as the bound says).
	e := newEnv(t, 3, threeNodesWith("balance = \"hash\"\nhash_key = \"query:room\"\nhash_balance_factor = 3"))
	a1, nodeA := e.dialLands("/room/x?room=alpha", nil)
	a2, again := e.dialLands("/room/x?room=alpha", nil)
	if again != nodeA {
		t.Fatalf("second client of room alpha on %s, first on %s", again, nodeA)
	}
	// Another room ranks first on another node for all but a (1/3)^k
	// share of addresses; rooms that land on nodeA are closed again so
	// the bound never has a say.
	other, nodeB := "", ""
	for k := range 20 {
		path := fmt.Sprintf("/room/x?room=beta-%d", k)
		c, n := e.dialLands(path, nil)
		e.closeAndWait(c, n, map[bool]int{true: 2, false: 0}[n == nodeA])
		if n != nodeA {
			other, nodeB = path, n
			break
		}
	}
	if other == "" {
		t.Fatalf("20 rooms all landed on %s", nodeA)
	}
	b, n := e.dialLands(other, nil)
	if n != nodeB {
		t.Fatalf("room %s on %s, and on %s before", other, n, nodeB)
	}
	// No key: least connections, so neither nodeA (2 tunnels) nor
	// nodeB (1).
	c, n := e.dialLands("/room/x", nil)
	if n == nodeA || n == nodeB {
		t.Fatalf("keyless request on %s; %s holds 2 tunnels and %s 1, the third none", n, nodeA, nodeB)
	}
	// A plain request with a key goes where a handshake with it goes.
	for _, tt := range []struct{ room, node string }{{"alpha", nodeA}, {strings.TrimPrefix(other, "/room/x?room="), nodeB}} {
		if got := e.replicaAt("/info?room=" + tt.room); got != e.replicaOf(tt.node) {
			t.Errorf("GET /info?room=%s answered by %s, want %s (node %s)", tt.room, got, e.replicaOf(tt.node), tt.node)
		}
	}
	for _, c := range []*websocket.Conn{a1, a2, b, c} {
		c.Close()
	}
	http.DefaultClient.CloseIdleConnections() // a keep-alive connection holds its slot
	e.waitZero()
}

// replicaAt returns the "replica" field of the relay's /info answer to a
// plain GET of path through the gateway.
func (e *env) replicaAt(path string) string {
	e.t.Helper()
	resp, err := http.Get("http://" + e.gw + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Replica string `json:"replica"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return info.Replica
}

// replicaOf returns the ID of the relay listening on addr.
func (e *env) replicaOf(addr string) string {
	e.t.Helper()
	i := slices.Index(e.addrs, addr)
	if i < 0 {
		e.t.Fatalf("no relay at %s", addr)
	}
	return e.relays[i].Info().Replica
}

// TestP2CPoolSpreads checks balance = "p2c" through real sockets: over
// two nodes both are drawn every time, so the less loaded one takes each
// new client and four clients split two and two.
func TestP2CPoolSpreads(t *testing.T) {
	e := newEnv(t, 2, strings.Replace(twoNodes, "name = \"relay\"\n", "name = \"relay\"\nbalance = \"p2c\"\n", 1))
	var conns []*websocket.Conn
	for range 4 {
		c, _ := e.dialLands("/room/x", nil)
		conns = append(conns, c)
	}
	for addr, n := range e.lives() {
		if n != 2 {
			t.Errorf("node %s holds %d tunnels, want 2 (%v)", addr, n, e.lives())
		}
	}
	for _, c := range conns {
		c.Close()
	}
	e.waitZero()
}
