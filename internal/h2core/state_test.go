package h2core

import (
	"errors"
	"testing"
)

// TestStateEnds pins when a stream ends: once both sides' END_STREAM
// went (this side's queued, not about to be), or at its first failure,
// whose error stays.
func TestStateEnds(t *testing.T) {
	var st State
	st.LocalEnded = true
	st.RemoteEnded = true
	if st.BothEnded() {
		t.Fatal("ended before this side's END_STREAM was queued")
	}
	st.EndSent = true
	if !st.BothEnded() {
		t.Fatal("not ended with both END_STREAMs")
	}
	if !st.Finish(nil) || st.Err != nil || st.BothEnded() {
		t.Fatal("the first Finish is not the end, or left an error")
	}
	reset := errors.New("reset")
	if st.Finish(reset) || st.Err != reset {
		t.Fatalf("a later Finish: Err %v, want the error recorded and no second end", st.Err)
	}
	if st.Finish(errors.New("another")); st.Err != reset {
		t.Fatalf("Err %v, want the first error", st.Err)
	}
}

// TestResetRecords pins the ring of recent resets: it holds the last
// size streams, a stream reset twice is no longer checked, a forgotten
// one is not found.
func TestResetRecords(t *testing.T) {
	var r ResetRecords
	r.Init(3)
	for id := uint32(1); id <= 9; id += 2 { // 1 3 5 7 9
		r.Record(id, int64(id), 100)
	}
	for _, tt := range []struct {
		id   uint32
		held bool
	}{{1, false}, {3, false}, {5, true}, {7, true}, {9, true}, {0, false}} {
		if got := r.Of(tt.id) != nil; got != tt.held {
			t.Errorf("stream %d remembered: %v, want %v", tt.id, got, tt.held)
		}
	}
	if rec := r.Of(7); rec.Left != 7 || rec.Window != 100 {
		t.Fatalf("record of 7: %+v", *rec)
	}
	r.Record(7, 50, 50)
	if rec := r.Of(7); rec.Left != -1 || rec.Window != -1 {
		t.Fatalf("stream reset twice still checked: %+v", *rec)
	}
	r.Forget(9)
	if r.Of(9) != nil {
		t.Fatal("a forgotten stream is still found")
	}
	if len(r.recs) != 3 {
		t.Fatalf("the ring holds %d records, want 3", len(r.recs))
	}
}
