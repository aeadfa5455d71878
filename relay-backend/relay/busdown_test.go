package relay_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// TestRedisLostClosesWith1012 pins the other half of issue 9's poisoned
// room: when Redis went away the relay kept its idle clients on a replica
// that could deliver nothing, and cut a sender without a close frame. Now
// killing redis-server gives every client, plain or relay.v1, idle or
// sending, a close frame: 1012 (service restart) for all, or 1011 for a
// sender whose message the log refused first; never a bare TCP close. The
// relay then answers /healthz and new joins with 503 while Redis is gone,
// and serves again once it is back.
func TestRedisLostClosesWith1012(t *testing.T) {
	srv := redistest.Start(t)
	r := startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{ID: "r1"}))
	var idle []*websocket.Conn
	for i := range 6 {
		room := fmt.Sprintf("room-%d", i%2)
		if i%3 == 0 {
			c := v1Dial(t, r, room, relayclient.Since{})
			joinV1(t, c)
			idle = append(idle, c.WS())
			continue
		}
		c, _ := dial(t, r, room, true)
		idle = append(idle, c)
	}
	sender, _ := dial(t, r, "room-0", true)

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// The sender races the relay's notice of the loss: its message meets
	// the dead log (1011) or the relay has already closed it (1012).
	_ = sender.WriteMessage(websocket.TextMessage, []byte("lost"))

	for i, c := range idle {
		if code, text := closeCode(t, c); code != websocket.CloseServiceRestart || text != "bus unavailable" {
			t.Errorf("idle client %d closed with %d %q, want 1012", i, code, text)
		}
	}
	if code, text := closeCode(t, sender); code != websocket.CloseServiceRestart && code != websocket.CloseInternalServerErr {
		t.Errorf("sender closed with %d %q, want 1012 or 1011", code, text)
	}
	waitIdle(t, r)
	if !r.Info().BusDown {
		t.Error("info does not say the bus is down")
	}
	if code, body := httpGet(t, r, "/healthz"); code != http.StatusServiceUnavailable || body != "bus unavailable" {
		t.Errorf("healthz = %d %q with Redis gone", code, body)
	}
	d := websocket.Dialer{HandshakeTimeout: ioTimeout}
	c, resp, err := d.Dial("ws://"+r.addr+"/room/room-0", nil)
	if err == nil {
		_ = c.Close()
		t.Fatal("joined with Redis gone")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("join with Redis gone: %v (response %v)", err, resp)
	}

	// Redis is back (empty): the relay takes joins again.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bus to be up again", func() bool { return !r.Info().BusDown })
	if code, body := httpGet(t, r, "/healthz"); code != http.StatusOK {
		t.Errorf("healthz = %d %q with Redis back", code, body)
	}
	a, _ := dial(t, r, "room-0", true)
	b, _ := dial(t, r, "room-0", true)
	send(t, a, websocket.TextMessage, []byte("again"))
	if _, p := read(t, b); string(p) != "again" {
		t.Fatalf("got %q after Redis came back", p)
	}
}

// TestLogFailureClosesWith1011: a message the room log cannot commit closes
// its sender with a 1011 close frame. The reader used to return at once and
// close the connection while the close frame was still being written from
// another goroutine, so the sender often saw a bare TCP close instead.
func TestLogFailureClosesWith1011(t *testing.T) {
	srv := redistest.Start(t)
	rep := redisReplica(t, srv.URL(), roomlog.RedisOptions{})
	rep.bus = memoryEndpoint(t) // Redis holds only the log: the bus stays up
	r := startRelay(t, rep.options(relay.Options{}))
	var senders []*websocket.Conn
	for range 8 {
		c, _ := dial(t, r, "doomed", true)
		senders = append(senders, c)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, c := range senders {
		send(t, c, websocket.TextMessage, []byte("lost"))
	}
	for i, c := range senders { // each message meets the dead log at once
		if code, text := closeCode(t, c); code != websocket.CloseInternalServerErr {
			t.Errorf("sender %d closed with %d %q, want 1011", i, code, text)
		}
	}
}
