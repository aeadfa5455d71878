package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// rawFrame writes one masked client frame on c's connection, beside the
// library (which never sends a text frame that is not UTF-8 on its own
// initiative, but does not check what it is given either).
func rawFrame(t *testing.T, c *websocket.Conn, fin bool, op wsframe.Opcode, payload []byte) {
	t.Helper()
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b := wsframe.AppendHeader(nil, wsframe.Header{Fin: fin, Op: op, Masked: true, Mask: key, Length: uint64(len(payload))})
	start := len(b)
	b = append(b, payload...)
	wsframe.Mask(key, 0, b[start:])
	_ = c.NetConn().SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.NetConn().Write(b); err != nil {
		t.Fatalf("write raw frame: %v", err)
	}
}

// euro is "€" (U+20AC), split below between two fragments of one message.
const euro = "\xe2\x82\xac"

// TestInvalidUTF8NotStored pins the poisoned room of issue 9: a text
// message that is not valid UTF-8 (whole, or only once its fragments are
// joined) was committed to the room log and replayed to every later joiner,
// whose browser then failed the connection (1006). Now its sender is closed
// with 1007, and neither the members (plain and relay.v1, on both replicas)
// nor a later joiner get it; a valid code point split across two fragments
// still goes through. A close frame whose reason is not UTF-8 is failed by
// the WebSocket library with 1002 (RFC 6455 section 8.1 asks for a failed
// connection and names no code; docs/protocol.md), and is never relayed.
func TestInvalidUTF8NotStored(t *testing.T) {
	for _, tc := range []struct {
		name   string
		poison func(t *testing.T, c *websocket.Conn)
		code   int
	}{
		{"one frame", func(t *testing.T, c *websocket.Conn) {
			rawFrame(t, c, true, wsframe.OpText, []byte("bad \xff\xfe"))
		}, websocket.CloseInvalidFramePayloadData},
		{"surrogate", func(t *testing.T, c *websocket.Conn) {
			rawFrame(t, c, true, wsframe.OpText, []byte("\xed\xa0\x80")) // U+D800, not a scalar value
		}, websocket.CloseInvalidFramePayloadData},
		{"fragments", func(t *testing.T, c *websocket.Conn) {
			// Each fragment alone is a valid prefix; joined, the second
			// byte of a 3-byte sequence is followed by ASCII.
			rawFrame(t, c, false, wsframe.OpText, []byte("ok "+euro[:2]))
			rawFrame(t, c, true, wsframe.OpContinuation, []byte("("))
		}, websocket.CloseInvalidFramePayloadData},
		{"truncated at the end", func(t *testing.T, c *websocket.Conn) {
			rawFrame(t, c, false, wsframe.OpText, []byte("ok "))
			rawFrame(t, c, true, wsframe.OpContinuation, []byte(euro[:2]))
		}, websocket.CloseInvalidFramePayloadData},
		{"close reason", func(t *testing.T, c *websocket.Conn) {
			rawFrame(t, c, true, wsframe.OpClose, []byte("\x03\xe8bye \xff"))
		}, websocket.CloseProtocolError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			r1 := startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{ID: "r1"}))
			r2 := startRelay(t, redisReplica(t, srv.URL(), roomlog.RedisOptions{}).options(relay.Options{ID: "r2"}))
			const room = "poison"
			plain, _ := dial(t, r2, room, true)
			v1 := v1Dial(t, r1, room, relayclient.Since{})
			joinV1(t, v1)
			sender, _ := dial(t, r1, room, true)
			poisoner, _ := dial(t, r1, room, true)

			send(t, poisoner, websocket.TextMessage, []byte("before"))
			// A valid message whose only code point is split in two.
			rawFrame(t, poisoner, false, wsframe.OpText, []byte(euro[:2]))
			rawFrame(t, poisoner, true, wsframe.OpContinuation, []byte(euro[2:]))
			tc.poison(t, poisoner)
			if code, text := closeCode(t, poisoner); code != tc.code {
				t.Fatalf("poisoner closed with %d %q, want %d", code, text, tc.code)
			}
			send(t, sender, websocket.TextMessage, []byte("after"))

			want := []string{"before", euro, "after"}
			for i, w := range want {
				if typ, b := read(t, plain); typ != websocket.TextMessage || string(b) != w {
					t.Fatalf("plain member got %s, want %s", msg(typ, string(b)), msg(websocket.TextMessage, w))
				}
				f := next(t, v1)
				if f.Kind != relayclient.KindMsg || f.Offset != uint64(i+1) || string(f.Body) != w {
					t.Fatalf("relay.v1 member got %s:%d %q, want MSG:%d %q", f.Kind, f.Offset, f.Body, i+1, w)
				}
			}
			// A later joiner, on either replica, replays the history
			// without it, then gets live messages.
			for _, s := range []*server{r1, r2} {
				late, _ := dial(t, s, room, true)
				for _, w := range want {
					if typ, b := read(t, late); typ != websocket.TextMessage || string(b) != w {
						t.Fatalf("late joiner on %s got %s, want %s", s.Info().Replica, msg(typ, string(b)), msg(websocket.TextMessage, w))
					}
				}
				send(t, sender, websocket.TextMessage, []byte("live"))
				if _, b := read(t, late); string(b) != "live" {
					t.Fatalf("late joiner on %s got %q, want live", s.Info().Replica, b)
				}
				_ = late.Close()
			}
			wantInvalid := uint64(1)
			if tc.code == websocket.CloseProtocolError {
				wantInvalid = 0 // the library refused it before the relay saw it
			}
			if n := r1.Info().InvalidText; n != wantInvalid {
				t.Errorf("invalid_text = %d, want %d", n, wantInvalid)
			}
		})
	}
}

// TestInvalidUTF8FromV1: a relay.v1 client that sends a text message that
// is not UTF-8 is closed with 1007 like a plain one; the message gets no ACK
// and no offset, so the room's offsets stay dense.
func TestInvalidUTF8FromV1(t *testing.T) {
	r := startRelay(t, relay.Options{})
	const room = "poison-v1"
	watcher := v1Dial(t, r, room, relayclient.Since{})
	joinV1(t, watcher)
	poisoner := v1Dial(t, r, room, relayclient.Since{})
	joinV1(t, poisoner)
	if err := poisoner.Send(relayclient.TypeText, []byte("before")); err != nil {
		t.Fatal(err)
	}
	rawFrame(t, poisoner.WS(), false, wsframe.OpText, []byte("x\xf0\x9f"))
	rawFrame(t, poisoner.WS(), true, wsframe.OpContinuation, []byte("\x98")) // U+1F600 cut short
	// ACK:1 may be cut by the close (an unacknowledged message may or may
	// not be committed); no second ACK may come.
	_ = poisoner.WS().SetReadDeadline(time.Now().Add(2 * ioTimeout))
	for {
		f, err := poisoner.Next()
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData {
				t.Fatalf("poisoner ended with %v, want close 1007", err)
			}
			break
		}
		if f.Kind != relayclient.KindAck || f.Offset != 1 {
			t.Fatalf("poisoner got %s:%d, want at most ACK:1 before the close", f.Kind, f.Offset)
		}
	}
	sender := v1Dial(t, r, room, relayclient.Since{})
	joinV1(t, sender)
	if err := sender.Send(relayclient.TypeText, []byte("after")); err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"before", "after"} {
		if f := next(t, watcher); f.Kind != relayclient.KindMsg || f.Offset != uint64(i+1) || string(f.Body) != w {
			t.Fatalf("watcher got %s:%d %q, want MSG:%d %q", f.Kind, f.Offset, f.Body, i+1, w)
		}
	}
}

// TestInvalidUTF8InHistory: a room whose history already holds a text
// message that is not UTF-8 (appended by a relay from before the check, or
// by an older replica still running) no longer breaks its plain members:
// they do not get it, live or replayed. relay.v1 members still get it, in a
// binary MSG frame, which cannot fail their connection, so their offsets
// stay dense.
func TestInvalidUTF8InHistory(t *testing.T) {
	srv := redistest.Start(t)
	rep := redisReplica(t, srv.URL(), roomlog.RedisOptions{})
	r := startRelay(t, rep.options(relay.Options{}))
	const room = "legacy"
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	sender, _ := dial(t, r, room, true)
	live, _ := dial(t, r, room, true)
	send(t, sender, websocket.TextMessage, []byte("one"))
	if _, b := read(t, live); string(b) != "one" { // committed at offset 1
		t.Fatalf("live plain member got %q, want one", b)
	}
	if _, err := rep.log.Append(ctx, room, relay.AppendForeignEnvelope(websocket.TextMessage, []byte("\xc3\x28"))); err != nil {
		t.Fatalf("append: %v", err)
	}
	send(t, sender, websocket.TextMessage, []byte("two"))
	if _, b := read(t, live); string(b) != "two" {
		t.Fatalf("live plain member got %q, want two", b)
	}
	late, _ := dial(t, r, room, true)
	for _, w := range []string{"one", "two"} {
		if _, b := read(t, late); string(b) != w {
			t.Fatalf("late plain member got %q, want %q", b, w)
		}
	}
	v1 := v1Dial(t, r, room, relayclient.Since{})
	fs := joinV1(t, v1)
	if got := kinds(fs); got != "POS:3 MSG:1 MSG:2 MSG:3 LIVE:3" {
		t.Fatalf("relay.v1 join %s", got)
	}
	if fs[2].Type != relayclient.TypeText || string(fs[2].Body) != "\xc3\x28" {
		t.Fatalf("relay.v1 offset 2 is type %d %q", fs[2].Type, fs[2].Body)
	}
	if n := r.Info().InvalidText; n != 2 {
		t.Errorf("invalid_text = %d, want 2 (one live fan-out, one replay)", n)
	}
}
