package h2core

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/wake"
	"golang.org/x/net/http2"
)

const (
	// WriteChunk is the most of the queue one network write takes: each
	// gets QueueConfig.WriteTimeout of its own, so that a peer that
	// reads slowly but steadily is never cut for the size of what was
	// queued for it.
	WriteChunk = 64 << 10
	// MaxAnswerBytes is QueueConfig.MaxAnswerBytes's default.
	MaxAnswerBytes = 1 << 20
	// KeepQueueCap is QueueConfig.KeepCap's default.
	KeepQueueCap = 64 << 10
)

// QueueConfig is how a Queue writes and what it bounds.
type QueueConfig struct {
	// WriteTimeout bounds each network write of at most WriteChunk
	// bytes: a connection that takes none within it is lost. Required.
	WriteTimeout time.Duration
	// MaxAnswerBytes bounds the answers to the peer (see Queue.Answer)
	// queued or being written: a peer that sends what calls for them
	// faster than it reads them is flooding, and its connection is cut
	// (ENHANCE_YOUR_CALM) (default MaxAnswerBytes).
	MaxAnswerBytes int
	// KeepCap is the largest buffer kept for reuse once written; a
	// larger one is dropped (default KeepQueueCap).
	KeepCap int
	// Lost wraps the cause of a connection its queue ended (a failed
	// write, answers past MaxAnswerBytes) in the role's error, the one
	// its streams get (the role's ErrConnLost). Required.
	Lost func(cause error) error
	// Cut, when set, is called with the lock held once answers went
	// past MaxAnswerBytes, with the error the queue now fails with: the
	// role ends its connection (without waiting: the lock is held).
	Cut func(err error)
	// Taken, when set, is called with the lock held each time a writer
	// takes what is queued: room was made (a role whose Writes wait for
	// room wakes them).
	Taken func()
}

// Queue is a connection's outgoing frames, in the order they go on the
// wire, and their writer. Frames are queued with the lock the role gave
// NewQueue held (the role orders with it what must follow the order of
// the wire: its hpack encoder, new stream identifiers, a stream's last
// frame), never written under it: a writer takes everything queued and
// writes it with no lock of the role's held. Writers are a goroutine's
// (Flush, each WriteChunk within WriteTimeout), a poller's (FlushNB,
// without blocking; what the socket does not take waits for the next
// writer), or a last one's (FlushNow); one writes at a time.
//
// Its methods named Locked are called with the role's lock held; the
// others take it. It must not be copied.
type Queue struct {
	mu  sync.Locker // the role's
	cfg QueueConfig
	fr  *http2.Framer // its writes append here

	// Under mu:
	buf    []byte // queued, not yet taken by a writer
	spare  []byte // the other buffer, given back by the last write
	frames int    // frames in buf the Framer wrote
	err    error  // once set, nothing more is queued
	broken error  // a write failed: nothing more is written
	// answered counts the bytes of answers queued or being written: a
	// writer takes off those it took only once its write of them is
	// done, so that a peer that does not read holds MaxAnswerBytes of
	// them at most, queued and in a write together.
	answered int

	wmu      sync.Mutex   // held by the one writer
	flushers atomic.Int32 // Flushes waiting for wmu
	kick     chan struct{}
}

// NewQueue returns an empty queue guarded by lock.
func NewQueue(lock sync.Locker, cfg QueueConfig) *Queue {
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = MaxAnswerBytes
	}
	if cfg.KeepCap <= 0 {
		cfg.KeepCap = KeepQueueCap
	}
	return &Queue{mu: lock, cfg: cfg, kick: wake.New()}
}

// NewFramer returns the connection's Framer: it reads from r, and what
// it writes, with the lock held, joins the queue.
func (q *Queue) NewFramer(r io.Reader) *http2.Framer {
	q.fr = http2.NewFramer(framerSink{q}, r)
	return q.fr
}

// framerSink is the Framer's writer: each Write is one whole frame.
type framerSink struct{ q *Queue }

func (s framerSink) Write(p []byte) (int, error) {
	s.q.buf = append(s.q.buf, p...)
	s.q.frames++
	return len(p), nil
}

// QueueLocked runs write with the Framer: its frames join the queue, in
// order. It fails, queueing nothing, once the queue fails (ErrLocked).
func (q *Queue) QueueLocked(write func(fr *http2.Framer) error) error {
	if q.err != nil {
		return q.err
	}
	return write(q.fr)
}

// Queue is QueueLocked, taking the lock.
func (q *Queue) Queue(write func(fr *http2.Framer) error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.QueueLocked(write)
}

// AnswerLocked is QueueLocked for frames that answer the peer's (PING
// and SETTINGS acknowledgements, and for a role that counts them,
// resets): they count against MaxAnswerBytes until their write is done.
// Past it the queue fails with Lost of a ConnError (ENHANCE_YOUR_CALM),
// returned, and Cut is called: nothing more is queued, and the frames
// the peer does not read are not followed by more.
func (q *Queue) AnswerLocked(write func(fr *http2.Framer) error) error {
	if q.err != nil {
		return q.err
	}
	before := len(q.buf)
	err := write(q.fr)
	q.answered += len(q.buf) - before
	if err == nil && q.answered > q.cfg.MaxAnswerBytes {
		q.err = q.cfg.Lost(ConnError{http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("control frames faster than their answers are read (%d bytes of answers unwritten)", q.answered)})
		if q.cfg.Cut != nil {
			q.cfg.Cut(q.err)
		}
		return q.err
	}
	return err
}

// Answer is AnswerLocked, taking the lock.
func (q *Queue) Answer(write func(fr *http2.Framer) error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.AnswerLocked(write)
}

// GoAway queues a GOAWAY for err when err is a ConnError (RFC 9113
// section 5.4.1): its code, its reason as debug data, and last as the
// last stream the peer opened that this side processed (0 for a client,
// whose peer opens none). It reports whether one was queued.
func (q *Queue) GoAway(last uint32, err error) bool {
	var ce ConnError
	if !errors.As(err, &ce) {
		return false
	}
	return q.Queue(func(fr *http2.Framer) error { return fr.WriteGoAway(last, ce.Code, []byte(ce.Reason)) }) == nil
}

// AppendLocked queues p as it is: bytes the role framed itself (the
// client preface, DATA gathered from many buffers).
func (q *Queue) AppendLocked(p ...byte) {
	q.buf = append(q.buf, p...)
}

// ErrLocked returns nil while frames may be queued, then why not.
func (q *Queue) ErrLocked() error { return q.err }

// FailLocked stops the queue: nothing more is queued, QueueLocked and
// AnswerLocked return err (unless the queue failed already). What is
// queued is still written.
func (q *Queue) FailLocked(err error) {
	if q.err == nil {
		q.err = err
	}
}

// LenLocked returns how many bytes are queued and not yet taken by a
// writer.
func (q *Queue) LenLocked() int { return len(q.buf) }

// Len is LenLocked, taking the lock.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

// Kick has the connection's writer goroutine (the one that waits on
// Kicked) write what is queued soon. It never blocks.
func (q *Queue) Kick() { wake.Signal(q.kick) }

// Kicked is signalled (capacity 1) by Kick.
func (q *Queue) Kicked() <-chan struct{} { return q.kick }

// Writing reports whether a write is under way (tests watch for a
// stalled one).
func (q *Queue) Writing() bool {
	if q.wmu.TryLock() {
		q.wmu.Unlock()
		return false
	}
	return true
}

// FlushStats is what one Flush wrote.
type FlushStats struct {
	// Frames counts the frames the Framer wrote among those written.
	Frames int
	// Writes counts the network writes.
	Writes int
}

// Flush writes everything queued to nc, each WriteChunk within
// WriteTimeout: the deadline is for progress, not for the backlog. When
// another Flush waits to write behind this one, this one leaves the
// queue, its callers' frames included, to it: the last Flush of a burst
// always writes, so frames many streams queue at one moment (a room's
// fan-out) leave in one write rather than one each. A failed write
// breaks the queue: the error (Lost of the cause) is returned by every
// Flush from then on, and the role ends its connection.
func (q *Queue) Flush(nc net.Conn) (FlushStats, error) {
	q.flushers.Add(1)
	q.wmu.Lock()
	q.flushers.Add(-1)
	defer q.wmu.Unlock()
	if q.flushers.Load() > 0 {
		q.mu.Lock()
		defer q.mu.Unlock()
		return FlushStats{}, q.broken
	}
	return q.writeLocked(nc, -1)
}

// FlushNow writes, unless a write is under way (ok is false then),
// write's frames (when write is not nil and the queue takes them) and
// everything queued before, to nc, within one deadline for all: within
// from now, or, when within is 0, the deadline already set on nc (a
// handshake's). It is for a last write (a GOAWAY on close, which does
// not wait for a slow peer to take a backlog) and for the handshake.
func (q *Queue) FlushNow(nc net.Conn, within time.Duration, write func(fr *http2.Framer) error) (ok bool, err error) {
	if !q.wmu.TryLock() {
		return false, nil
	}
	defer q.wmu.Unlock()
	if write != nil {
		if err := q.Queue(write); err != nil {
			return true, err
		}
	}
	_, err = q.writeLocked(nc, within)
	return true, err
}

// writeLocked takes everything queued and writes it to nc, with wmu
// held: each WriteChunk within WriteTimeout when within is negative,
// all of it within within when positive, under nc's own deadline when 0.
func (q *Queue) writeLocked(nc net.Conn, within time.Duration) (FlushStats, error) {
	b, frames, answers, err := q.take()
	if err != nil || len(b) == 0 {
		return FlushStats{}, err
	}
	var st FlushStats
	if within > 0 {
		_ = nc.SetWriteDeadline(time.Now().Add(within))
	}
	for off := 0; off < len(b) && err == nil; {
		end := min(off+WriteChunk, len(b))
		if within < 0 {
			_ = nc.SetWriteDeadline(time.Now().Add(q.cfg.WriteTimeout))
		}
		var n int
		n, err = nc.Write(b[off:end])
		off += n
		st.Writes++
	}
	st.Frames = frames
	return st, q.written(b, answers, len(b), err)
}

// FlushNB writes what is queued with write, which must not block: it
// returns how much the socket took (less than it was given, with no
// error, when the socket is full). What it does not take goes first in
// the queue, for the writer goroutine, which FlushNB kicks; when a write
// is under way, it only kicks. It is a poller's writer: a connection it
// reads is written on it too, with no goroutine woken while the socket
// takes everything. A failed write is returned as Flush returns it.
func (q *Queue) FlushNB(write func(b []byte) (int, error)) error {
	if !q.wmu.TryLock() {
		q.Kick()
		return nil
	}
	defer q.wmu.Unlock()
	b, _, answers, err := q.take()
	if err != nil || len(b) == 0 {
		return err
	}
	n, err := write(b)
	return q.written(b, answers, n, err)
}

// take takes what is queued for a write, with wmu held: the buffer, its
// frames, and the answers counted so far (all of them are in it).
func (q *Queue) take() (b []byte, frames, answers int, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.broken != nil || len(q.buf) == 0 {
		return nil, 0, 0, q.broken
	}
	b, frames, answers = q.buf, q.frames, q.answered
	q.buf, q.frames, q.spare = q.spare[:0], 0, nil
	if q.cfg.Taken != nil {
		q.cfg.Taken()
	}
	return b, frames, answers, nil
}

// written ends a write of b that wrote n bytes with err, with wmu held:
// the answers in it are written when all of it is; what was not written
// goes back to the front of the queue when the write failed only for
// the moment (n short, no error).
func (q *Queue) written(b []byte, answers, n int, err error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case err != nil:
		if q.broken == nil {
			q.broken = q.cfg.Lost(fmt.Errorf("write: %w", err))
		}
		q.FailLocked(q.broken)
		return q.broken
	case n < len(b):
		// The rest goes first, before what was queued meanwhile. Its
		// answers stay counted: the next writer takes them off once it
		// wrote them, with the rest of its queue.
		q.buf = append(b[n:len(b):len(b)], q.buf...)
		q.Kick()
		return nil
	}
	q.answered -= answers // they left
	if cap(b) <= q.cfg.KeepCap {
		q.spare = b[:0]
	}
	return nil
}
