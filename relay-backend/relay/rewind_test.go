package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

// rewindLog makes room's log in Redis end at offset keep within its epoch,
// as a replica promoted before the master sent it the tail would hold it:
// the next append reuses the offsets after keep.
func rewindLog(t *testing.T, admin *redis.Client, room string, keep uint64) {
	t.Helper()
	ctx := context.Background()
	meta, stream := "wsgate:{"+room+"}:meta", "wsgate:{"+room+"}:log"
	kept, err := admin.XRangeN(ctx, stream, "-", fmt.Sprintf("%d-0", keep), 10_000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(kept)) != keep {
		t.Fatalf("stream holds %d entries up to %d", len(kept), keep)
	}
	_, err = admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, stream) // the stream's last id must go back too
		for _, m := range kept {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: m.ID, Values: m.Values})
		}
		p.HSet(ctx, meta, "o", keep)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// v1Until reads c's frames until a MSG with body last has come and c is
// live, and returns them.
func v1Until(t *testing.T, c *relayclient.Conn, last string) []relayclient.Frame {
	t.Helper()
	var fs []relayclient.Frame
	seen := false
	for range 1000 {
		f := next(t, c) // fails on an offset not above the position
		f.Body = append([]byte(nil), f.Body...)
		fs = append(fs, f)
		seen = seen || f.Kind == relayclient.KindMsg && string(f.Body) == last
		if seen && c.Live() {
			return fs
		}
	}
	t.Fatalf("no %q in %s", last, kinds(fs))
	return nil
}

// bodies renders the MSG frames of fs after the last RESYNC as "a0 a1".
func bodies(fs []relayclient.Frame) string {
	var out []string
	for _, f := range fs {
		switch f.Kind {
		case relayclient.KindResync:
			out = out[:0]
		case relayclient.KindMsg:
			out = append(out, string(f.Body))
		}
	}
	return strings.Join(out, " ")
}

// ackUntil reads c's frames until ACK last and returns the ACKs' offsets.
func ackUntil(t *testing.T, c *relayclient.Conn, last uint64) string {
	t.Helper()
	var acks []string
	for range 1000 {
		f := next(t, c)
		if f.Kind == relayclient.KindAck {
			acks = append(acks, fmt.Sprint(f.Offset))
			if f.Offset == last {
				break
			}
		}
	}
	return strings.Join(acks, " ")
}

func count(fs []relayclient.Frame, k relayclient.Kind) int {
	n := 0
	for _, f := range fs {
		if f.Kind == k {
			n++
		}
	}
	return n
}

// TestLogRewind: when the room log's offsets go back within its epoch
// (Redis lost the tail of the log on a failover: offsets up to N were
// delivered, the log now ends at 2), the next messages reuse offsets 3...
// No live member drops them as duplicates: relay.v1 members on both
// replicas get one RESYNC, the retained history and every new message;
// plain members get every new message once, and the old history again
// only when the rewind went deeper than the offsets a room remembers; the
// sender gets its ACKs; and a resume from the new position replays
// nothing. The rewind is noticed from the reused offsets ("shallow",
// "deep"), or on the repair after a resubscribe (as after a failover) from
// a log that ends below the delivered offset ("resubscribe") or holds
// another message at it ("overtaken": the new messages were committed
// while the relays were not subscribed).
func TestLogRewind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sent  int    // messages before the rewind
		how   string // "send", "kill" the subscriptions then send, or "commit" unpublished then kill
		plain string // what plain members get after it
	}{
		{"shallow", 5, "send", "b0 b1 b2 b3 b4"},
		{"deep", 300, "send", "a0 a1 b0 b1 b2 b3 b4"},
		{"resubscribe", 5, "kill", "b0 b1 b2 b3 b4"},
		{"overtaken", 5, "commit", "b0 b1 b2 b3 b4"},
	} {
		t.Run(tc.name, func(t *testing.T) { testLogRewind(t, tc.sent, tc.how, tc.plain) })
	}
}

func testLogRewind(t *testing.T, sent int, how, wantPlain string) {
	r1, r2, admin := redisPair(t)

	writer := v1Dial(t, r1, "tail", relayclient.Since{})
	joinV1(t, writer)
	v1s := map[string]*relayclient.Conn{}
	plains := map[string]*websocket.Conn{}
	for _, s := range []*server{r1, r2} {
		c := v1Dial(t, s, "tail", relayclient.Since{})
		joinV1(t, c)
		v1s[s.Info().Replica] = c
		plains[s.Info().Replica], _ = dial(t, s, "tail", true)
	}
	readPlain := func(name string, c *websocket.Conn, n int) []string {
		t.Helper()
		var got []string
		for range n {
			typ, b := read(t, c)
			if typ != websocket.TextMessage {
				t.Fatalf("plain on %s: type %d %q", name, typ, b)
			}
			got = append(got, string(b))
		}
		return got
	}

	sendN(t, writer.WS(), "a", sent)
	last := fmt.Sprint("a", sent-1)
	if got := ackUntil(t, writer, uint64(sent)); strings.Count(got, " ") != sent-1 {
		t.Fatalf("writer ACKs %s", got)
	}
	for name, c := range v1s {
		fs := v1Until(t, c, last)
		if count(fs, relayclient.KindMsg) != sent || c.Position().Offset != uint64(sent) {
			t.Fatalf("v1 on %s before the rewind: %d MSG, at %+v", name, count(fs, relayclient.KindMsg), c.Position())
		}
	}
	for name, c := range plains {
		if got := readPlain(name, c, sent); got[sent-1] != last {
			t.Fatalf("plain on %s before the rewind: ...%s", name, got[sent-1])
		}
	}
	epoch := writer.Position().Epoch

	rewindLog(t, admin, "tail", 2)
	ctx := context.Background()
	if how == "commit" { // offsets 3..7, past the 5 delivered
		for i := range 5 {
			env := relay.AppendForeignEnvelope(websocket.TextMessage, fmt.Appendf(nil, "b%d", i))
			if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: "wsgate:{tail}:log", ID: fmt.Sprintf("%d-0", 3+i), Values: []any{"d", env}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.HSet(ctx, "wsgate:{tail}:meta", "o", 7).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if how != "send" {
		if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "both relays to notice the rewind", func() bool {
			return r1.Info().Rewinds == 1 && r2.Info().Rewinds == 1
		})
	}
	if how != "commit" {
		sendN(t, writer.WS(), "b", 5) // committed at offsets 3..7
		if got := ackUntil(t, writer, 7); got != "3 4 5 6 7" {
			t.Fatalf("writer ACKs %s", got)
		}
	}
	for name, c := range v1s {
		fs := v1Until(t, c, "b4")
		if count(fs, relayclient.KindResync) != 1 || fs[0].Kind != relayclient.KindResync || string(fs[0].Body) != epoch {
			t.Fatalf("v1 on %s after the rewind: %s (want one RESYNC of epoch %s first)", name, kinds(fs), epoch)
		}
		if got := bodies(fs); got != "a0 a1 b0 b1 b2 b3 b4" {
			t.Fatalf("v1 on %s after the rewind: %s: %s", name, kinds(fs), got)
		}
		if p := c.Position(); p != (relayclient.Since{Epoch: epoch, Offset: 7}) {
			t.Fatalf("v1 on %s at %+v", name, p)
		}
	}
	for name, c := range plains {
		if got := strings.Join(readPlain(name, c, strings.Count(wantPlain, " ")+1), " "); got != wantPlain {
			t.Fatalf("plain on %s after the rewind: %s", name, got)
		}
	}
	for _, s := range []*server{r1, r2} {
		if i := s.Info(); i.Rewinds != 1 {
			t.Fatalf("%s counted %d rewinds, want 1", i.Replica, i.Rewinds)
		}
	}

	// Live again: the next message reaches everyone once, in order.
	send(t, writer.WS(), websocket.TextMessage, []byte("c"))
	for name, c := range v1s {
		if f := next(t, c); f.Kind != relayclient.KindMsg || f.Offset != 8 || string(f.Body) != "c" {
			t.Fatalf("v1 on %s: %s:%d %q", name, f.Kind, f.Offset, f.Body)
		}
	}
	for name, c := range plains {
		if got := readPlain(name, c, 1); got[0] != "c" {
			t.Fatalf("plain on %s: %s", name, got[0])
		}
	}
	// A resume from the position a member reached replays nothing.
	back := v1Dial(t, r2, "tail", v1s["r2"].Position())
	if got := kinds(joinV1(t, back)); got != "POS:8 LIVE:8" {
		t.Fatalf("resume: %s", got)
	}
}
