package relay

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// Close codes the relay sends.
const (
	closeGoingAway      = websocket.CloseGoingAway               // 1001: drain
	closeInvalidPayload = websocket.CloseInvalidFramePayloadData // 1007: a text message that is not UTF-8
	closeServiceRestart = websocket.CloseServiceRestart          // 1012: the bus (Redis) is unreachable
	closeTryAgainLater  = websocket.CloseTryAgainLater           // 1013: slow consumer
)

// member is one joined client, keyed by a stable id for its whole life. A
// member that came over HTTP/1.1 has a conn with one reader (serveConn)
// and one writer (pumpWrites); other goroutines only call kick, which uses
// WriteControl and Close. One that came over HTTP/2 has h2 instead, and no
// goroutine of its own while idle (see h2Member); queue and writerDone
// are then nil.
type member struct {
	id         uint64
	conn       *websocket.Conn
	h2         *h2Member
	room       *room
	v1         bool              // relay.v1 was negotiated
	since      relayclient.Since // where a relay.v1 client resumes (zero: none)
	queue      chan outMsg
	wt         time.Duration
	kicked     atomic.Bool
	done       chan struct{} // closed when the reader has finished
	writerDone chan struct{}
	admitted   chan struct{} // closed by runRoom once preamble is set (or refused); nil over HTTP/2
	preamble   []outMsg      // written before the queue; set before admitted closes
	gone       bool          // left its room; guarded by room.mu
}

// kick starts closing m with code and reason and reports whether this call
// did it (only the first call does). It never blocks: the close frame is
// written from its own goroutine, which gives the client WriteTimeout to
// answer before the connection is cut.
func (m *member) kick(code int, reason string) bool {
	if !m.kicked.CompareAndSwap(false, true) {
		return false
	}
	if m.h2 != nil {
		m.h2.closeWith(websocket.FormatCloseMessage(code, reason))
		return true
	}
	go m.sendClose(code, reason)
	return true
}

// cut ends m's connection (its stream over HTTP/2) without a close
// handshake; its reader then sees it and m leaves.
func (m *member) cut() {
	if m.h2 != nil {
		m.h2.cut()
		return
	}
	_ = m.conn.Close()
}

// offer queues msg for m without waiting and reports whether it went
// (or never will, m being closed); false means m's queue is full.
func (m *member) offer(msg outMsg) bool {
	if m.h2 != nil {
		return m.h2.push(msg)
	}
	select {
	case m.queue <- msg:
		return true
	default:
		return false
	}
}

// offerUntil is offer waiting for room in m's queue until deadline or m's
// end.
func (m *member) offerUntil(msg outMsg, deadline time.Time) bool {
	if m.h2 != nil {
		return m.h2.pushUntil(msg, deadline)
	}
	select {
	case m.queue <- msg:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case m.queue <- msg:
		return true
	case <-m.done:
		return true
	case <-t.C:
		return false
	}
}

// markAdmitted tells m's writer that its preamble is set (or that it was
// refused).
func (m *member) markAdmitted() {
	if m.h2 != nil {
		m.h2.mu.Lock()
		m.h2.admitted = true
		m.h2.startWriterLocked()
		m.h2.mu.Unlock()
		return
	}
	close(m.admitted)
}

func (m *member) sendClose(code int, reason string) {
	deadline := time.Now().Add(m.wt)
	if err := m.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline); err != nil {
		_ = m.conn.Close()
		return
	}
	t := time.NewTimer(m.wt)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		_ = m.conn.Close()
	}
}

// pumpWrites is m's only writer. Once m is admitted it writes the optional
// hello frame (hello, given the preamble's length), then the preamble
// (POS... LIVE, or the history), then the send queue, until the reader
// finishes or m is kicked.
func (m *member) pumpWrites(hello func(history int) []byte) {
	defer close(m.writerDone)
	select {
	case <-m.admitted:
	case <-m.done:
		return
	}
	if m.kicked.Load() {
		return
	}
	pre := m.preamble
	m.preamble = nil
	if hello != nil {
		if err := m.write(websocket.TextMessage, hello(len(pre))); err != nil {
			_ = m.conn.Close()
			return
		}
	}
	for _, msg := range pre {
		if m.kicked.Load() {
			return
		}
		if err := m.write(msg.typ, msg.data); err != nil {
			_ = m.conn.Close()
			return
		}
	}
	for {
		select {
		case <-m.done:
			return
		case msg := <-m.queue:
			if m.kicked.Load() {
				return
			}
			if err := m.write(msg.typ, msg.data); err != nil {
				_ = m.conn.Close()
				return
			}
		}
	}
}

func (m *member) write(typ int, data []byte) error {
	if err := m.conn.SetWriteDeadline(time.Now().Add(m.wt)); err != nil {
		return err
	}
	return m.conn.WriteMessage(typ, data)
}

// serveConn runs one upgraded client from join to leave on the connection's
// own goroutine, which is also its reader.
func (r *Relay) serveConn(c *websocket.Conn, roomID string, hello bool, since relayclient.Since) {
	m := &member{
		id:         r.nextID.Add(1),
		conn:       c,
		v1:         c.Subprotocol() == relayclient.Subprotocol,
		since:      since,
		queue:      make(chan outMsg, r.opt.SendQueue),
		wt:         r.opt.WriteTimeout,
		done:       make(chan struct{}),
		writerDone: make(chan struct{}),
		admitted:   make(chan struct{}),
	}
	if err := r.join(m, roomID); err != nil {
		code, text := joinRefusal(err)
		_ = c.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(code, text), time.Now().Add(m.wt))
		_ = c.Close()
		return
	}
	var h func(int) []byte
	if hello && !m.v1 { // relay.v1 starts with POS, and only binary frames
		h = func(history int) []byte { return r.helloFrame(m.id, roomID, history) }
	}
	go m.pumpWrites(h)
	r.pumpReads(m)
	r.leave(m)
	close(m.done)
	_ = c.Close()
	<-m.writerDone
}

// joinRefusal is the close code and reason for a join refused by err:
// drain began, or the room filled up, or the bus went down, between the
// upgrade check and the join.
func joinRefusal(err error) (int, string) {
	switch {
	case errors.Is(err, errRoomFull):
		return closeTryAgainLater, "room full"
	case errors.Is(err, errBusDown):
		return closeServiceRestart, "bus unavailable"
	}
	return closeGoingAway, "going away"
}

// pumpReads reads m's messages and commits each to the room log, which
// publishes it to every replica; it acknowledges each to a relay.v1 sender
// and hands it to the room's delivery goroutine. A text message that is not
// valid UTF-8 (RFC 6455 section 8.1) closes m with 1007 and goes nowhere: a
// browser fails its whole connection on such a frame, so storing it would
// break every later joiner of the room. A message the log refuses closes m
// with 1011: it was not committed, and the ACKs that follow would no longer
// match the messages sent. After either close the reader drops what m sends
// until m answers the close (or the close times out), so the close frame is
// written before the connection ends.
func (r *Relay) pumpReads(m *member) {
	m.conn.SetReadLimit(r.opt.MaxMessage)
	for {
		typ, data, err := m.conn.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				// The library has already sent close 1009.
				r.log.Info("closed client for an oversized message", "client", m.id, "room", m.room.id, "limit", r.opt.MaxMessage)
			}
			return
		}
		r.onMessage(m, typ, data)
	}
}

// onMessage handles a message m sent, whole (its fragments assembled), as
// pumpReads describes.
func (r *Relay) onMessage(m *member, typ int, data []byte) {
	rm := m.room
	if m.kicked.Load() {
		return // closing: read on until the client answers the close
	}
	// The fragments are assembled, so a code point split across two of
	// them is checked whole.
	if typ == websocket.TextMessage && !utf8.Valid(data) {
		if n := r.invalidText.Add(1); n&(n-1) == 0 { // bounded log volume
			r.log.Info("closed client for a text message that is not UTF-8", "client", m.id, "room", rm.id, "bytes", len(data), "invalid_text", n)
		}
		m.kick(closeInvalidPayload, "text message is not valid UTF-8")
		return // read on until the client answers the close
	}
	env := appendEnvelope(make([]byte, 0, envelopeHeader+len(data)), r.origin, m.id, typ, data)
	ctx, cancel := context.WithTimeout(r.ctx, logTimeout)
	pos, err := r.roomLog.Append(ctx, rm.id, env)
	cancel()
	if err != nil {
		r.countLogError("append", rm.id, err)
		m.kick(websocket.CloseInternalServerErr, "room log unavailable")
		return
	}
	if m.v1 {
		r.enqueue(m, v1Frame(relayclient.KindAck, 0, pos.Offset, nil))
	}
	rm.push(roomlog.Entry{Epoch: pos.Epoch, Offset: pos.Offset, Data: env})
}

// hello is the JSON frame a plain client that asked for it (?hello=1)
// gets first: who served it, and how many of the messages that follow are
// the room's retained history, replayed (the rest are live), so that the
// demo page can mark them.
type hello struct {
	Type    string `json:"type"`
	Replica string `json:"replica"`
	Client  uint64 `json:"client"`
	Room    string `json:"room"`
	History int    `json:"history"`
}

// helloFrame is member id's hello in roomID, before history replayed
// messages.
func (r *Relay) helloFrame(id uint64, roomID string, history int) []byte {
	b, _ := json.Marshal(hello{Type: "hello", Replica: r.opt.ID, Client: id, Room: roomID, History: history})
	return b
}
