package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

// frame is one relay.v1 frame a scripted relay sends.
type frame struct {
	kind relayclient.Kind
	off  uint64
}

// scriptedRelay answers one relay.v1 upgrade with POS, then script, then
// close 1001, as a relay does whose client the gateway moves between two
// frames. It stands in for the relay where the order of frames must be
// exact: a relay that skips an offset, or one whose ACK overtakes its
// delivery at the moment the connection ends.
func scriptedRelay(t *testing.T, script []frame) string {
	t.Helper()
	up := websocket.Upgrader{Subprotocols: []string{relayclient.Subprotocol}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := up.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer c.Close()
		write := func(f relayclient.Frame) bool {
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			return c.WriteMessage(websocket.BinaryMessage, relayclient.AppendFrame(nil, f)) == nil
		}
		if !write(relayclient.Frame{Kind: relayclient.KindPos, Body: []byte("e1")}) {
			return
		}
		for _, s := range script {
			f := relayclient.Frame{Kind: s.kind, Offset: s.off}
			if s.kind == relayclient.KindMsg {
				f.Type, f.Body = relayclient.TypeBinary, []byte("not a wsload message")
			}
			if !write(f) {
				return
			}
		}
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "moved"), time.Now().Add(10*time.Second))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for range 100 { // until the client answers the close
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestOffsetsOfOneConnection runs wsload's relay.v1 reader over one
// connection that ends with close 1001 after a scripted sequence of
// frames, with writes still unacknowledged, and checks the gaps and
// repeated offsets it counts. Offsets the relay skipped are gaps; offsets
// still on their way behind an ACK that overtook them are not, nor are the
// member's own offsets whose ACK had not come yet (at most one per
// unacknowledged write). An offset that comes twice is repeated; the ACK,
// after LIVE, of a write committed before the join's replay (which leaves
// it out) is not.
func TestOffsetsOfOneConnection(t *testing.T) {
	const (
		msg  = relayclient.KindMsg
		ack  = relayclient.KindAck
		live = relayclient.KindLive
	)
	for _, tc := range []struct {
		name    string
		unacked int // writes sent before the frames, oldest first
		script  []frame
		gaps    int64
		dups    int64
	}{
		{"dense", 1, []frame{{live, 0}, {msg, 1}, {ack, 2}, {msg, 3}}, 0, 0},
		{"relay skips an offset", 0, []frame{{live, 0}, {msg, 1}, {msg, 3}}, 1, 0},
		{"relay skips in the replay", 0, []frame{{msg, 1}, {msg, 2}, {msg, 4}, {live, 4}}, 1, 0},
		// The relay sent ACK 5 at commit, before its room delivered 3
		// and 4 to this member; the connection ended in between.
		{"ACK ahead of the delivery", 1, []frame{{live, 0}, {msg, 1}, {msg, 2}, {ack, 5}}, 0, 0},
		{"ACK ahead, then a skip", 1, []frame{{live, 0}, {msg, 1}, {ack, 5}, {msg, 3}}, 1, 0},
		// 2 is the member's own write, committed; its ACK had not come.
		{"own ACK behind the delivery", 1, []frame{{live, 0}, {msg, 1}, {msg, 3}}, 0, 0},
		{"more holes than unacknowledged writes", 1, []frame{{live, 0}, {msg, 1}, {msg, 4}}, 1, 0},
		{"hole below the last ACK", 2, []frame{{live, 0}, {msg, 1}, {ack, 3}, {msg, 4}}, 1, 0},
		// The replay without since leaves out the member's own 2 (or
		// 1), committed before the join; its ACK follows LIVE.
		{"own write last in the replay", 1, []frame{{msg, 1}, {live, 2}, {ack, 2}}, 0, 0},
		{"own write first in the history", 1, []frame{{msg, 2}, {live, 2}, {ack, 1}}, 0, 0},
		{"own write last in the replay, ACK on its way", 1, []frame{{msg, 1}, {live, 2}}, 0, 0},
		{"LIVE above what the replay gave", 0, []frame{{msg, 1}, {live, 3}}, 2, 0},
		{"nothing replayed", 1, []frame{{live, 3}, {ack, 2}, {msg, 4}}, 0, 0},
		{"MSG repeated", 0, []frame{{live, 0}, {msg, 1}, {msg, 2}, {msg, 2}}, 0, 1},
		{"ACK repeated", 2, []frame{{live, 0}, {msg, 1}, {ack, 2}, {ack, 2}}, 0, 1},
		{"ACK of a replayed offset", 1, []frame{{msg, 2}, {live, 2}, {ack, 2}}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := scriptedRelay(t, tc.script)
			rec := NewRecorder("drain")
			f := &fanout{c: &Config{Dialer: Dialer{Timeout: 10 * time.Second}}, rec: rec, resume: true}
			m := &fanMember{id: 1, recv: map[uint32]*seen{},
				room: &fanRoom{target: Target{Addr: addr, Host: addr, Path: "/room/g"}}}
			for i := range tc.unacked {
				m.unacked = append(m.unacked, uint64(i))
			}
			m.seq = uint64(tc.unacked)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn := f.dial(ctx, m)
			if conn == nil {
				t.Fatalf("dial failed: %v", rec.Report().FailedBy)
			}
			f.stopping.Store(true) // one connection: no reconnect after the close
			f.attach(m, conn)
			f.wg.Wait()
			if r := rec.Report(); r.Gaps != tc.gaps || r.DupOffsets != tc.dups {
				t.Fatalf("gaps %d, repeated offsets %d; want %d, %d", r.Gaps, r.DupOffsets, tc.gaps, tc.dups)
			}
		})
	}
}
