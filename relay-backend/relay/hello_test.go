package relay_test

import (
	"encoding/json"
	"testing"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/relay-backend/relay"
)

// TestHelloCountsHistory pins that the demo's hello frame says how many of
// the messages after it are the room's history, replayed, over HTTP/1.1
// and over HTTP/2: the demo page showed replayed messages as if they had
// just been sent, having nothing to tell them from live ones by.
func TestHelloCountsHistory(t *testing.T) {
	s := startRelay(t, relay.Options{})
	a, _ := dial(t, s, "hist", false)
	b, _ := dial(t, s, "hist", false)
	for _, m := range []string{"one", "two"} {
		send(t, a, websocket.TextMessage, []byte(m))
		if _, got := read(t, b); string(got) != m { // committed: the history holds it
			t.Fatalf("b got %q, want %q", got, m)
		}
	}
	hc := dialH2(t, s)
	h1, hello1 := dial(t, s, "hist", true)
	h2, hello2 := joinH2(t, hc, "hist", true)
	joined := map[string]*websocket.Conn{"http1": h1, "h2": h2}
	for name, h := range map[string][]byte{"http1": hello1, "h2": hello2} {
		var got struct {
			Type    string `json:"type"`
			History *int   `json:"history"`
		}
		if err := json.Unmarshal(h, &got); err != nil || got.Type != "hello" || got.History == nil || *got.History != 2 {
			t.Fatalf("%s: hello %s: want history 2", name, h)
		}
		for _, m := range []string{"one", "two"} {
			if _, b := read(t, joined[name]); string(b) != m {
				t.Fatalf("%s: replayed %q, want %q", name, b, m)
			}
		}
	}
	send(t, a, websocket.TextMessage, []byte("live"))
	for name, c := range joined {
		if _, b := read(t, c); string(b) != "live" {
			t.Fatalf("%s: got %q, want live", name, b)
		}
	}
	// A room without history says 0.
	_, h := dial(t, s, "empty", true)
	var got struct {
		History *int `json:"history"`
	}
	if err := json.Unmarshal(h, &got); err != nil || got.History == nil || *got.History != 0 {
		t.Fatalf("hello in an empty room %s: want history 0", h)
	}
}
