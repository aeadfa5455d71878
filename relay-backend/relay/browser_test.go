package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/browsertest"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// pageProbe is what the page's WebSocket saw.
type pageProbe struct {
	Got    []string `json:"got"`
	Closed *int     `json:"closed"` // close code, nil while open
	Open   bool     `json:"open"`
}

// joinJS opens window.probe's WebSocket on the room at path.
const joinJS = `(() => {
  const s = window.probe = {got: [], closed: null, waiters: []};
  const wake = () => { for (const w of s.waiters.splice(0)) w(); };
  s.ws = new WebSocket("ws://" + location.host + %s);
  s.ws.onmessage = (e) => { s.got.push(typeof e.data === "string" ? e.data : "(binary)"); wake(); };
  s.ws.onclose = (e) => { s.closed = e.code; wake(); };
  return true;
})()`

// waitJS resolves once window.probe has n messages or its WebSocket closed.
const waitJS = `new Promise((resolve) => {
  const s = window.probe;
  const check = () => {
    if (s.closed !== null || s.got.length >= %d) {
      resolve(JSON.stringify({got: s.got, closed: s.closed, open: s.ws.readyState === WebSocket.OPEN}));
    } else {
      s.waiters.push(check);
    }
  };
  check();
})`

// TestPoisonedRoomInBrowser is issue 9's poisoned room as a browser meets
// it: one text frame that is not UTF-8 used to be stored in the room's
// history and replayed to every joiner, and Chromium failed each of those
// connections (1006) until the history expired. After such an attempt
// (closed with 1007), and with such a message already in the history from
// an older relay, Chromium joins the room, gets the valid history, stays
// open and gets a live message.
func TestPoisonedRoomInBrowser(t *testing.T) {
	ctx := browsertest.Start(t)
	srv := redistest.Start(t)
	rep := redisReplica(t, srv.URL(), roomlog.RedisOptions{})
	r := startRelay(t, rep.options(relay.Options{}))
	const room = "poison"

	poisoner, _ := dial(t, r, room, true)
	send(t, poisoner, websocket.TextMessage, []byte("before"))
	rawFrame(t, poisoner, true, wsframe.OpText, []byte("caf\xe9")) // Latin-1, not UTF-8
	if code, text := closeCode(t, poisoner); code != websocket.CloseInvalidFramePayloadData {
		t.Fatalf("poisoner closed with %d %q, want 1007", code, text)
	}
	lctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if _, err := rep.log.Append(lctx, room, relay.AppendForeignEnvelope(websocket.TextMessage, []byte("old \xff"))); err != nil {
		t.Fatalf("append: %v", err)
	}
	sender, _ := dial(t, r, room, true)
	send(t, sender, websocket.TextMessage, []byte("history"))

	wait := func(n int) pageProbe {
		t.Helper()
		js, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(waitJS, n), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
		var p pageProbe
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatalf("probe %q: %v", js, err)
		}
		if p.Closed != nil {
			t.Fatalf("Chromium's WebSocket closed with %d after receiving %q", *p.Closed, p.Got)
		}
		if !p.Open {
			t.Fatalf("Chromium's WebSocket is not open after receiving %q", p.Got)
		}
		return p
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+r.addr+"/")); err != nil {
		t.Fatalf("browser: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(joinJS, strconv.Quote("/room/"+room)))); err != nil {
		t.Fatalf("browser: %v", err)
	}
	if p := wait(2); !slices.Equal(p.Got, []string{"before", "history"}) {
		t.Fatalf("Chromium replayed %q, want before, history", p.Got)
	}
	// The history is over; a live message reaches a connection still open.
	send(t, sender, websocket.TextMessage, []byte("live"))
	if p := wait(3); !slices.Equal(p.Got, []string{"before", "history", "live"}) {
		t.Fatalf("Chromium got %q, want before, history, live", p.Got)
	}
}

// pageLine is one line of the demo page's log.
type pageLine struct {
	Class string `json:"class"`
	Text  string `json:"text"`
}

// TestDemoPageMarksHistory opens the demo page in Chromium in a room that
// already holds two messages: the page showed the replayed history as if
// it had just been said. Now the two replayed messages are marked
// history, a line says where the live ones start, and a message sent
// after the join is live, unmarked.
func TestDemoPageMarksHistory(t *testing.T) {
	ctx := browsertest.Start(t)
	r := startRelay(t, relay.Options{ID: "relay-a"})
	a, _ := dial(t, r, "demo", false)
	b, _ := dial(t, r, "demo", false)
	chat := func(text string) {
		t.Helper()
		m, _ := json.Marshal(map[string]string{"type": "chat", "replica": "relay-a", "text": text})
		send(t, a, websocket.TextMessage, m)
		if _, got := read(t, b); string(got) != string(m) { // committed: in the history
			t.Fatalf("b got %s, want %s", got, m)
		}
	}
	chat("said before")
	chat("said before too")

	// The page's log as JSON, without each line's time, once it has n
	// lines (polled on the page's mutations, within 30 s).
	logOf := func(n int) string {
		t.Helper()
		js, err := chromedp.Run(ctx, chromedp.Poll[string](fmt.Sprintf(`document.querySelectorAll("#log div").length >= %d &&
  JSON.stringify([...document.querySelectorAll("#log div")].map(d => ({class: d.className, text: d.textContent.split("  ").slice(1).join("  ")})))`, n),
			chromedp.WithPollingMutation()))
		if err != nil {
			now, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("log").innerText`))
			t.Fatalf("browser: %v, waiting for %d lines in the page's log:\n%s", err, n, now)
		}
		return js
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+r.addr+"/")); err != nil {
		t.Fatalf("browser: %v", err)
	}
	logOf(5) // connected, joined, the history, its end
	chat("said now")
	js := logOf(6)
	var lines []pageLine
	if err := json.Unmarshal([]byte(js), &lines); err != nil {
		t.Fatalf("page log %q: %v", js, err)
	}
	want := []pageLine{
		{"sys", "connected"},
		{"sys", "joined room demo on relay-a; the room's last 2 message(s), sent before you joined, follow"},
		{"msg hist", "history [relay-a] said before"},
		{"msg hist", "history [relay-a] said before too"},
		{"sys", "end of history: live from here"},
		{"msg live", "[relay-a] said now"},
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("the page's log:\n%+v\nwant:\n%+v", lines, want)
	}
}
