package h2core

// Stream is what both roles keep of one stream: its state, its receive
// half and its send window. Its holder guards it with its connection's
// lock and readies it with Recv.Init.
type Stream struct {
	State
	Recv
	Send
}

// State is where a stream is in its life (RFC 9113 section 5.1), as both
// roles track it. The zero value is an open stream.
type State struct {
	// LocalEnded: this side's END_STREAM is queued or about to be; no
	// more DATA may be written.
	LocalEnded bool
	// EndSent: this side's END_STREAM is queued ("half-closed (local)").
	// A stream stays counted by its connection until then, so that
	// frames queued after its end never find it open.
	EndSent bool
	// RemoteEnded: the peer's END_STREAM arrived ("half-closed
	// (remote)").
	RemoteEnded bool
	// ReadClosed: nobody reads any more; what arrives is discarded and
	// its window given back (Recv).
	ReadClosed bool
	// Ended: the stream is no longer counted by its connection.
	Ended bool
	// Err is why the stream failed (reset, connection lost), nil while
	// it has not.
	Err error
}

// BothEnded reports whether both sides sent END_STREAM and the stream has
// not ended yet: it is "closed" (section 5.1), and its holder ends it
// (Finish with no error).
func (st *State) BothEnded() bool {
	return st.EndSent && st.RemoteEnded && !st.Ended
}

// Finish records the end of the stream, failed with err unless err is
// nil (the first error stays), and reports whether this is its end, not a
// later call: the holder then takes it off its connection.
func (st *State) Finish(err error) (first bool) {
	if err != nil && st.Err == nil {
		st.Err = err
	}
	if st.Ended {
		return false
	}
	st.Ended = true
	return true
}

// ResetRecord is a stream this side reset lately: frames the peer sent
// before it saw the reset are ignored (RFC 9113 section 5.1, "closed"),
// yet still checked as they would have been on the open stream.
type ResetRecord struct {
	// ID is the stream's identifier; 0 once it is forgotten.
	ID uint32
	// Left is what the request's content-length still announced, -1:
	// none, or no longer checked.
	Left int64
	// Window is the stream's send window, -1: no longer checked.
	Window int64
}

// ResetRecords remembers the last streams this side reset, a ring of a
// fixed size (Init), so that what it holds does not grow with the resets.
type ResetRecords struct {
	recs []ResetRecord
	size int
	next int
}

// Init sets how many resets r remembers.
func (r *ResetRecords) Init(size int) { r.size = size }

// Record remembers that stream id was reset with left bytes of its body
// still announced and a send window of window (-1 each: not checked). A
// stream reset again is no longer checked.
func (r *ResetRecords) Record(id uint32, left, window int64) {
	if rec := r.Of(id); rec != nil {
		rec.Left, rec.Window = -1, -1
		return
	}
	if len(r.recs) < r.size {
		r.recs = append(r.recs, ResetRecord{id, left, window})
		return
	}
	if r.size == 0 {
		return
	}
	r.recs[r.next] = ResetRecord{id, left, window}
	r.next = (r.next + 1) % r.size
}

// Of returns the record of stream id if it was reset lately, else nil.
func (r *ResetRecords) Of(id uint32) *ResetRecord {
	if id == 0 {
		return nil
	}
	for i := range r.recs {
		if r.recs[i].ID == id {
			return &r.recs[i]
		}
	}
	return nil
}

// Forget takes stream id off the records: the peer reset it too, and
// what it sends after is an error.
func (r *ResetRecords) Forget(id uint32) {
	if rec := r.Of(id); rec != nil {
		rec.ID = 0
	}
}
