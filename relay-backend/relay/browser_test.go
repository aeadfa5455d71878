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
