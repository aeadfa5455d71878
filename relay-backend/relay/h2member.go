package relay

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/internal/wake"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

// h2Member is the WebSocket of a member that came over HTTP/2: its frames
// are read from and written to its stream (RFC 8441) by goroutines that
// run only while there is something to do, so that an idle member holds
// no goroutine and no buffer (issue 21, item 5). A reader starts when
// DATA arrives and ends when the stream's buffer is empty; a writer starts
// when something is queued and ends when the queue is empty. Each message
// read is handled as pumpReads handles it, and the writer keeps
// pumpWrites's order: the hello, the preamble, then the queue; a close
// frame goes before anything still queued and is the last frame sent.
type h2Member struct {
	r     *Relay
	m     *member
	s     *h2serve.Stream
	hello func(history int) []byte // written first once m is admitted, given the preamble's length (nil: none)

	// signals counts the stream's readiness calls a reader has not yet
	// seen; the call that makes it 1 starts a reader. It is never reset
	// once the member has finished, so no reader starts after.
	signals atomic.Int64
	fr      *frameReader // the reader's; nil between messages

	mu       sync.Mutex
	queue    []outMsg // messages to send, grown as needed
	pong     []byte   // a pong to send: the latest ping's payload
	closeMsg []byte   // the close frame's payload once one is to be sent
	// closing is set with closeMsg: a batch the writer is writing stops
	// at its next chunk, so the close does not wait behind it (a kicked
	// writer over HTTP/1.1 stops after the message in hand).
	closing    atomic.Bool
	closeSent  bool // the close frame was taken: nothing more is sent
	writing    bool // a writer runs
	admitted   bool // m.preamble is set (or m was refused): in place of m.admitted
	started    bool // the hello and the preamble were taken
	readDone   bool // the reader finished: end the stream after the close
	streamDone bool // the stream was closed
	space      chan struct{}
	linger     *time.Timer // cuts the stream if the client does not answer a close
}

// readBufs holds the readers' buffers between bursts.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

// frameReaders holds the readers' parsers between messages.
var frameReaders = sync.Pool{New: func() any { return new(frameReader) }}

// writeBufs holds the writers' encoding buffers between bursts.
var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// maxWriteChunk is how much the writer encodes before handing it to the
// stream, which splits it into DATA frames as the send window allows.
const maxWriteChunk = 32 << 10

// serveH2 runs a member upgraded on s (an accepted extended CONNECT) and
// returns at once, leaving s detached: the member lives on in s's
// callbacks and the short-lived goroutines they start.
func (r *Relay) serveH2(s *h2serve.Stream, roomID string, v1, hello bool, since relayclient.Since) {
	m := &member{
		id:    r.nextID.Add(1),
		v1:    v1,
		since: since,
		wt:    r.opt.WriteTimeout,
		done:  make(chan struct{}),
	}
	h := &h2Member{r: r, m: m, s: s}
	m.h2 = h
	if hello && !v1 { // relay.v1 starts with POS, and only binary frames
		h.hello = func(history int) []byte { return r.helloFrame(m.id, roomID, history) }
	}
	if err := r.join(m, roomID); err != nil {
		code, text := joinRefusal(err)
		_ = s.SetWriteDeadline(time.Now().Add(m.wt))
		_, _ = s.Write(appendFrame(nil, outMsg{websocket.CloseMessage, websocket.FormatCloseMessage(code, text)}))
		return // the handler's return closes s
	}
	s.Detach(h.onReadable)
	h.onReadable() // what arrived before Detach
}

// appendFrame appends msg as one unmasked, unfragmented frame (a server's,
// RFC 6455 section 5.1).
func appendFrame(dst []byte, msg outMsg) []byte {
	dst = wsframe.AppendHeader(dst, wsframe.Header{Fin: true, Op: wsframe.Opcode(msg.typ), Length: uint64(len(msg.data))})
	return append(dst, msg.data...)
}

// onReadable is the stream's readiness callback: it starts a reader unless
// one runs. It never blocks.
func (h *h2Member) onReadable() {
	if h.signals.Add(1) == 1 {
		go h.runReads()
	}
}

// runReads reads what the stream holds, then returns; it finishes the
// member when the stream ends or the member closes.
func (h *h2Member) runReads() {
	if h.readRounds() {
		// Signalled on every round: start afresh rather than loop
		// unbounded.
		h.signals.Store(0)
		h.onReadable()
	}
}

// readRounds drains the stream until no signal came while it did, and
// reports whether it gave up after maxReadRounds instead. The signals
// stay above zero meanwhile, so no other reader starts.
func (h *h2Member) readRounds() bool {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	for range maxReadRounds {
		seen := h.signals.Load()
		if h.fr == nil {
			h.fr = frameReaders.Get().(*frameReader)
			*h.fr = frameReader{limit: h.r.opt.MaxMessage}
		}
		for {
			n, err := h.s.TryRead(*bp)
			if n > 0 && !h.consume((*bp)[:n]) || err != nil {
				h.finish()
				return false // signals stays above 0: no reader starts again
			}
			if n == 0 {
				break
			}
		}
		// Before the signals drop to zero: a reader may start then.
		if h.fr.idle() {
			frameReaders.Put(h.fr)
			h.fr = nil
		}
		if h.signals.CompareAndSwap(seen, 0) {
			return false
		}
	}
	return true
}

// maxReadRounds bounds one reader's rounds of draining the stream.
const maxReadRounds = 1 << 10

// consume parses p and handles what it holds; it reports whether the
// member reads on.
func (h *h2Member) consume(p []byte) bool {
	r, m := h.r, h.m
	for len(p) > 0 {
		n, ev, err := h.fr.next(p)
		p = p[n:]
		if err != nil {
			fe, _ := err.(*frameError)
			if fe == errReadLimit {
				r.log.Info("closed client for an oversized message", "client", m.id, "room", m.room.id, "limit", r.opt.MaxMessage)
			}
			h.closeWith(websocket.FormatCloseMessage(int(fe.code), fe.reason))
			return false
		}
		switch ev.kind {
		case evMessage:
			r.onMessage(m, ev.typ, ev.data)
		case evPing:
			h.mu.Lock()
			if h.closeMsg == nil {
				h.pong = ev.data
				h.startWriterLocked()
			}
			h.mu.Unlock()
		case evClose:
			code, _, err := wsframe.ParseClosePayload(ev.data)
			switch {
			case err != nil:
				h.closeWith(websocket.FormatCloseMessage(closeProtocolError, "invalid close frame"))
			case code == wsframe.CloseNoStatus:
				h.closeWith([]byte{})
			default:
				h.closeWith(websocket.FormatCloseMessage(int(code), ""))
			}
			return false
		}
	}
	return true
}

// finish ends the member once its reader is done: it leaves its room and
// the stream ends after whatever close frame is queued.
func (h *h2Member) finish() {
	h.r.leave(h.m)
	close(h.m.done)
	h.mu.Lock()
	h.readDone = true
	if h.linger != nil {
		h.linger.Stop()
	}
	h.signalSpaceLocked()
	h.startWriterLocked()
	h.mu.Unlock()
}

// closeWith queues a close frame with payload unless one is queued: it
// goes before anything still queued, and nothing follows it.
func (h *h2Member) closeWith(payload []byte) {
	h.mu.Lock()
	if h.closeMsg == nil {
		h.closeMsg = payload
		h.closing.Store(true)
		h.queue, h.pong = nil, nil
		h.signalSpaceLocked() // a pushUntil waiting for room is done
		h.startWriterLocked()
	}
	h.mu.Unlock()
}

// signalSpaceLocked wakes a pushUntil waiting for room: there is some,
// or the member takes nothing more. Called with h.mu held.
func (h *h2Member) signalSpaceLocked() {
	if h.space != nil {
		wake.Signal(h.space)
	}
}

// cut ends the stream now, as closing the connection of a member over
// HTTP/1.1 does: the reader sees it and the member leaves.
func (h *h2Member) cut() {
	h.mu.Lock()
	h.streamDone = true
	h.mu.Unlock()
	_ = h.s.Close()
	h.onReadable()
}

// push queues msg unless the queue is full: SendQueue messages wait in it.
// A batch the writer took and is writing is not counted, as pumpWrites's
// message in hand is not, so a member holds at most twice SendQueue
// messages. It reports whether msg is queued or will never be sent.
func (h *h2Member) push(msg outMsg) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closeMsg != nil || h.readDone {
		return true // closing: dropped, as a kicked writer drops its queue
	}
	if len(h.queue) >= h.r.opt.SendQueue {
		return false
	}
	h.queue = append(h.queue, msg)
	h.startWriterLocked()
	return true
}

// pushUntil queues msg, waiting for room in the queue until deadline or
// the member's end; it reports whether msg went (or never will).
func (h *h2Member) pushUntil(msg outMsg, deadline time.Time) bool {
	for range maxPushWaits {
		if h.push(msg) {
			return true
		}
		h.mu.Lock()
		if h.space == nil {
			h.space = wake.New()
		}
		space := h.space
		h.mu.Unlock()
		if h.push(msg) {
			return true
		}
		select {
		case <-h.m.done:
			return true
		default:
		}
		if wake.Wait(space, deadline) != nil {
			return false
		}
	}
	return false
}

// maxPushWaits bounds pushUntil's waits for room.
const maxPushWaits = 1 << 16

// startWriterLocked starts a writer unless one runs or there is nothing it
// could do. Called with h.mu held.
func (h *h2Member) startWriterLocked() {
	if h.writing || h.streamDone {
		return
	}
	h.writing = true
	go h.runWrites()
}

// takeLocked takes what the writer is to send next, nil when nothing,
// and how many of those messages came from the queue.
func (h *h2Member) takeLocked() ([]outMsg, int) {
	if h.closeSent {
		return nil, 0
	}
	if h.closeMsg != nil {
		h.closeSent = true
		return []outMsg{{websocket.CloseMessage, h.closeMsg}}, 0
	}
	var out []outMsg
	if h.pong != nil {
		out = append(out, outMsg{websocket.PongMessage, h.pong})
		h.pong = nil
	}
	if !h.admitted {
		return out, 0 // markAdmitted starts a writer
	}
	if !h.started {
		h.started = true
		if h.hello != nil {
			out = append(out, outMsg{websocket.TextMessage, h.hello(len(h.m.preamble))})
			h.hello = nil
		}
		out = append(out, h.m.preamble...)
		h.m.preamble = nil
	}
	queued := len(h.queue)
	if queued > 0 {
		out = append(out, h.queue...)
		h.queue = nil
		if h.space != nil {
			wake.Signal(h.space)
		}
	}
	return out, queued
}

// runWrites writes what is queued, then returns; it ends the stream once
// the reader is done and the close frame, if any, went.
func (h *h2Member) runWrites() {
	for range maxWriteRounds {
		h.mu.Lock()
		out, queued := h.takeLocked()
		if len(out) == 0 {
			h.writing = false
			end := h.readDone && !h.streamDone
			if end {
				h.streamDone = true
			}
			h.mu.Unlock()
			if end {
				_ = h.s.Close()
			}
			return
		}
		closing := h.closeSent
		h.mu.Unlock()
		err := h.write(out)
		h.mu.Lock()
		if err == nil && closing && !h.readDone {
			// The client has WriteTimeout to answer the close.
			h.linger = time.AfterFunc(h.m.wt, h.cut)
		}
		if err != nil {
			h.writing = false
			h.signalSpaceLocked()
		} else if queued > 0 {
			h.signalSpaceLocked()
		}
		h.mu.Unlock()
		if err != nil {
			h.cut()
			return
		}
	}
	h.mu.Lock()
	h.writing = false
	h.startWriterLocked() // queued on every round: start afresh
	h.mu.Unlock()
}

// maxWriteRounds bounds one writer's rounds of emptying the queue.
const maxWriteRounds = 1 << 10

// write encodes msgs and writes them, each chunk within WriteTimeout.
func (h *h2Member) write(msgs []outMsg) error {
	bp := writeBufs.Get().(*[]byte)
	defer writeBufs.Put(bp)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= 64<<10 {
			*bp = buf[:0]
		}
	}()
	for i, msg := range msgs {
		if msg.typ != websocket.CloseMessage && h.closing.Load() {
			return nil // kicked: the close goes next
		}
		buf = appendFrame(buf, msg)
		if len(buf) < maxWriteChunk && i < len(msgs)-1 {
			continue
		}
		_ = h.s.SetWriteDeadline(time.Now().Add(h.m.wt))
		if _, err := h.s.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	return nil
}
