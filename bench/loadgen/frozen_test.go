package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFrozenIn checks how frozen members are spread over rooms: as evenly
// as possible, the first rooms taking the remainder, every frozen member
// placed once.
func TestFrozenIn(t *testing.T) {
	for _, tc := range []struct {
		frozen, rooms int
		want          []int
	}{
		{0, 3, []int{0, 0, 0}},
		{1, 1, []int{1}},
		{1, 5, []int{1, 0, 0, 0, 0}},
		{3, 2, []int{2, 1}},
		{7, 3, []int{3, 2, 2}},
		{6, 3, []int{2, 2, 2}},
		{2, 0, nil},
	} {
		t.Run(fmt.Sprintf("%d in %d", tc.frozen, tc.rooms), func(t *testing.T) {
			var got []int
			for r := range tc.rooms {
				got = append(got, frozenIn(tc.frozen, tc.rooms, r))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("per room %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFrozenSplit: the children of -procs hold every frozen member once,
// and each child's spread over its own rooms puts in every room as many
// as the whole run's spread does.
func TestFrozenSplit(t *testing.T) {
	for _, tc := range []struct{ frozen, rooms, members, procs int }{
		{1, 1, 100, 1},
		{1, 5, 20, 3},
		{7, 10, 3, 4},
		{13, 10, 3, 3},
		{5, 3, 4, 5}, // more processes than rooms
	} {
		t.Run(fmt.Sprintf("%d frozen %d rooms %d procs", tc.frozen, tc.rooms, tc.procs), func(t *testing.T) {
			c := Config{Scenario: "fanout", URL: "ws://127.0.0.1:1/room/r%d", Rooms: tc.rooms, Members: tc.members, Frozen: tc.frozen}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			total := 0
			for i := range tc.procs {
				s := c.Split(i, tc.procs)
				if err := s.Validate(); err != nil {
					t.Errorf("child %d: %v", i, err)
				}
				total += s.Frozen
				for r := range s.Rooms {
					if got, want := frozenIn(s.Frozen, s.Rooms, r), frozenIn(tc.frozen, tc.rooms, s.RoomBase+r); got != want {
						t.Errorf("child %d room %d (run room %d): %d frozen, want %d", i, r, s.RoomBase+r, got, want)
					}
				}
			}
			if total != tc.frozen {
				t.Errorf("children hold %d frozen, want %d", total, tc.frozen)
			}
		})
	}
}

func TestFrozenValidate(t *testing.T) {
	const url = "ws://127.0.0.1:1/room/r%d"
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"one of 100", Config{Scenario: "fanout", URL: url, Rooms: 1, Members: 100, Frozen: 1}, true},
		{"all but one per room", Config{Scenario: "fanout", URL: url, Rooms: 2, Members: 3, Frozen: 4}, true},
		{"a room of frozen only", Config{Scenario: "fanout", URL: url, Rooms: 2, Members: 3, Frozen: 5}, false},
		{"uneven: one room too many", Config{Scenario: "fanout", URL: url, Rooms: 3, Members: 2, Frozen: 4}, false},
		{"negative", Config{Scenario: "fanout", URL: url, Frozen: -1}, false},
		{"kill", Config{Scenario: "kill", URL: url, KillPID: 1, Frozen: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestFrozenExpected: a frozen member sends nothing and is owed nothing,
// so the others' expected deliveries count the readers only.
func TestFrozenExpected(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		rooms, members, frozen int
		seq                    uint64 // messages each member that is not frozen sent
		exp, sent              int64
	}{
		{"none frozen", 1, 4, 0, 10, 4 * 10 * 3, 40},
		{"one of four", 1, 4, 1, 10, 3 * 10 * 2, 30},
		{"one of 100", 1, 100, 1, 5, 99 * 5 * 98, 99 * 5},
		{"two rooms, one frozen", 2, 3, 1, 1, 2*1*1 + 3*1*2, 5},
		{"all but one", 1, 3, 2, 7, 0, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Scenario: "fanout", URL: "ws://127.0.0.1:1/room/r%d", Rooms: tc.rooms, Members: tc.members, Frozen: tc.frozen}.withDefaults()
			f := newFanout(&c, NewRecorder("fanout"), false)
			frozen := 0
			for _, r := range f.rooms {
				for _, m := range r.members {
					if m.frozen {
						frozen++
						continue
					}
					m.seq = tc.seq
				}
			}
			if frozen != tc.frozen {
				t.Fatalf("%d members frozen, want %d", frozen, tc.frozen)
			}
			if exp, sent := f.expected(); exp != tc.exp || sent != tc.sent {
				t.Errorf("expected() = %d, %d; want %d, %d", exp, sent, tc.exp, tc.sent)
			}
		})
	}
}

func TestFrozenEnd(t *testing.T) {
	for _, tc := range []struct {
		code uint16
		err  error
		want string
	}{
		{CloseAbnormal, fmt.Errorf("read: %w", os.ErrDeadlineExceeded), "open"},
		{CloseAbnormal, errors.New("read: connection reset by peer"), "1006"},
		{1013, nil, "1013"},
		{1012, nil, "1012"},
	} {
		if got := frozenEnd(tc.code, tc.err); got != tc.want {
			t.Errorf("frozenEnd(%d, %v) = %q, want %q", tc.code, tc.err, got, tc.want)
		}
	}
}

// TestFrozenReportMerge: the frozen fields of -procs children add up (the
// newest delivery is the latest of theirs), and the table and the metrics
// show them.
func TestFrozenReportMerge(t *testing.T) {
	a, b := NewReport("fanout"), NewReport("fanout")
	a.Frozen, a.FrozenReceived, a.FrozenLastSentMS = 1, 100, 2500
	a.FrozenEnded["1006"] = 1
	b.Frozen, b.FrozenReceived, b.FrozenLastSentMS = 2, 7, 900
	b.FrozenEnded["1006"], b.FrozenEnded["open"] = 1, 1
	m := NewReport("fanout")
	m.Merge(a)
	m.Merge(b)
	m.Finalize()
	if m.Frozen != 3 || m.FrozenReceived != 107 || m.FrozenLastSentMS != 2500 || m.FrozenEnded["1006"] != 2 || m.FrozenEnded["open"] != 1 {
		t.Errorf("merged frozen %d received %d last %v ended %v", m.Frozen, m.FrozenReceived, m.FrozenLastSentMS, m.FrozenEnded)
	}
	met := m.Metrics()
	for k, want := range map[string]float64{"frozen": 3, "frozen_received": 107, "frozen_ended.open": 1, "frozen_last_sent_ms": 2500} {
		if met[k] != want {
			t.Errorf("metric %s = %v, want %v", k, met[k], want)
		}
	}
	if !KnownMetric("frozen_ended.1013") {
		t.Error("frozen_ended.1013 is not a known metric")
	}
	var buf bytes.Buffer
	if err := m.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"frozen ", "frozen_received", "frozen_ended.open", "frozen_last_sent_ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestFanoutFrozen runs a fanout with a frozen member through a relay and
// through the gateway: the others get every message, the frozen member is
// counted apart, and its socket, read once the run ended, holds every
// message of the run (a short run fits in the socket buffers, so nothing
// ends it).
func TestFanoutFrozen(t *testing.T) {
	rs, addrs := startRelays(t, 2)
	gw := startGateway(t, addrs)
	for via, addr := range map[string]string{"relay": addrs[0], "gateway": gw} {
		t.Run(via, func(t *testing.T) {
			r := runOK(t, Config{Scenario: "fanout", URL: "ws://" + addr + "/room/frozen%d", Rooms: 2, Members: 4, Frozen: 3,
				MsgRate: 20, Size: 64, Duration: 500 * time.Millisecond, Settle: 500 * time.Millisecond})
			// Room 0 has members 2 and 3 frozen, room 1 member 3.
			if r.Connected != 8 || r.Frozen != 3 {
				t.Fatalf("connected %d frozen %d", r.Connected, r.Frozen)
			}
			if r.Sent == 0 || r.Delivered != 100 || r.Duplicates != 0 || r.OutOfOrder != 0 || r.Dropped != 0 {
				t.Fatalf("sent %d expected %d received %d dup %d ooo %d dropped %v", r.Sent, r.Expected, r.Received, r.Duplicates, r.OutOfOrder, r.DroppedBy)
			}
			if r.Latency.Count != r.Received {
				t.Errorf("latency observations %d, received %d", r.Latency.Count, r.Received)
			}
			// Every frozen member gets every message of its room: in room
			// 0 two receive the sends of two members, in room 1 one of
			// three; the rooms' shares of Sent are not reported, so check
			// the bounds and the sum through Expected.
			readersSent := r.Expected // room 0: sent0 × 1; room 1: sent1 × 2
			if r.FrozenReceived < r.Sent || r.FrozenReceived > 2*r.Sent || r.FrozenReceived != 3*r.Sent-readersSent {
				t.Errorf("frozen received %d, sent %d, expected %d", r.FrozenReceived, r.Sent, r.Expected)
			}
			if r.FrozenEnded["open"] != 3 || r.FrozenLastSentMS <= 0 {
				t.Errorf("frozen ended %v, last sent %v ms", r.FrozenEnded, r.FrozenLastSentMS)
			}
			waitRelaysEmpty(t, rs)
		})
	}
}
