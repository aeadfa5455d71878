package loadgen

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// restartableRelay is an in-process relay that a POST drains, closes and
// starts again on the same address and bus, like a rolling restart.
type restartableRelay struct {
	t    *testing.T
	addr string
	mem  *bus.Memory
	cur  chan *relay.Relay // holds the running relay
}

func newRestartableRelay(t *testing.T) *restartableRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rr := &restartableRelay{t: t, addr: ln.Addr().String(), mem: bus.NewMemory(), cur: make(chan *relay.Relay, 1)}
	rr.serve(ln)
	t.Cleanup(func() {
		r := <-rr.cur
		_ = r.Close(context.Background())
		_ = rr.mem.Close()
	})
	return rr
}

func (rr *restartableRelay) serve(ln net.Listener) {
	r := relay.New(relay.Options{Bus: rr.mem.Endpoint(), Logger: quiet(), DrainWindow: 200 * time.Millisecond})
	go func() { _ = r.Serve(ln) }()
	rr.cur <- r
}

// ServeHTTP drains the relay, then restarts it in the background.
func (rr *restartableRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	r := <-rr.cur
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Drain(ctx)
		_ = r.Close(ctx)
		for range 100 {
			ln, err := net.Listen("tcp", rr.addr)
			if err == nil {
				rr.serve(ln)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		rr.t.Error("could not listen again on " + rr.addr)
		rr.cur <- r
	}()
	w.WriteHeader(http.StatusAccepted)
}

// TestDrainResumesWithoutLoss drains the only relay mid-fanout and brings
// it back on the same address: every client must see 1001, come back with
// ?since=, and every ACKed write must reach every other member. The time
// until the last one was back counts from the drain request, so it is
// never shorter than any one client's time back from its own drop.
func TestDrainResumesWithoutLoss(t *testing.T) {
	rr := newRestartableRelay(t)
	admin := httptest.NewServer(rr)
	defer admin.Close()
	r, err := Run(context.Background(), Config{
		Scenario: "drain", URL: "ws://" + rr.addr + "/room/dr%d", Rooms: 3, Members: 3, MsgRate: 20,
		Duration: 1500 * time.Millisecond, After: 300 * time.Millisecond, DrainURL: admin.URL,
		Window: 300 * time.Millisecond, GiveUp: 10 * time.Second, Settle: 5 * time.Second, Seed: 7, Log: tlog{t},
	})
	if r != nil && r.FailedBy["no_relay_v1"] > 0 {
		t.Skip("the relay does not speak relay.v1")
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.CloseCodes["1001"] != 9 || r.Back != 9 || r.NotBack != 0 {
		t.Fatalf("close codes %v, back %d, not back %d", r.CloseCodes, r.Back, r.NotBack)
	}
	if r.BackAllMS <= 0 || r.BackAllMS < r.Reconnect.Max {
		t.Fatalf("back_all_ms %v with reconnect_ms max %v: not counted from the drain", r.BackAllMS, r.Reconnect.Max)
	}
	if r.LostWrites != 0 || r.Gaps != 0 || r.DupOffsets != 0 || r.Duplicates != 0 || r.Acked != r.Sent || r.Delivered != 100 {
		t.Fatalf("lost %d gaps %d dup offsets %d dups %d acked %d of %d delivered %v",
			r.LostWrites, r.Gaps, r.DupOffsets, r.Duplicates, r.Acked, r.Sent, r.Delivered)
	}
}

// TestParseSignal pins the names -signal takes: the drain scenario is
// how an upgrade is proved, and wsload refused the signal a wsgate
// upgrade uses (`-signal USR2`: unknown signal "USR2").
func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		want syscall.Signal
		ok   bool
	}{
		{"USR2", syscall.SIGUSR2, true},
		{"SIGUSR2", syscall.SIGUSR2, true},
		{"usr2", syscall.SIGUSR2, true},
		{"HUP", syscall.SIGHUP, true},
		{"TERM", syscall.SIGTERM, true},
		{"sigint", syscall.SIGINT, true},
		{"KILL", syscall.SIGKILL, true},
		{"USR3", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSignal(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	c := Config{Scenario: "drain", URL: "ws://127.0.0.1:1/room/r%d", KillPID: 1, Signal: "USR2"}
	if err := c.Validate(); err != nil {
		t.Errorf("drain -kill-pid 1 -signal USR2: %v", err)
	}
}
