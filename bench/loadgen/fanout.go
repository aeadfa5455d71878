package loadgen

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
)

// bitset is a growable set of sequence numbers.
type bitset []uint64

func (b *bitset) set(i uint64) (was bool) {
	w := int(i / 64)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w-len(*b)+1)...)
	}
	m := uint64(1) << (i % 64)
	was = (*b)[w]&m != 0
	(*b)[w] |= m
	return was
}

func (b bitset) has(i uint64) bool {
	w := int(i / 64)
	return w < len(b) && b[w]&(uint64(1)<<(i%64)) != 0
}

// seen is what one receiver got from one sender.
type seen struct {
	got    bitset
	resent bitset // copies flagged as resent
	hi     uint64
	any    bool
}

// fanMember is one member of a fanout room. Its receive state is owned by
// its read loop; the send state (seq, unacked, acked, conn) is guarded by
// mu.
type fanMember struct {
	id     uint32
	room   *fanRoom
	frozen bool // connects, then neither reads nor sends (Config.Frozen)

	recv map[uint32]*seen // by sender; read loop only

	mu      sync.Mutex
	conn    *Conn // nil while disconnected
	gone    bool  // never connected, or gave up reconnecting
	seq     uint64
	unacked []uint64 // seqs sent on the current connection, oldest first
	resend  []uint64 // seqs whose ACK never came, to send after reconnect
	acked   bitset
	nAcked  int64
	since   relayclient.Since
	// per-connection relay.v1 offset checking (read loop only)
	live    bool
	checked bool                // connected with a since: the replay must be contiguous
	msgHi   uint64              // highest offset of a MSG or LIVE on this connection
	ackHi   uint64              // highest offset of an ACK on this connection
	water   uint64              // highest offset below which all were seen
	passed  [][2]uint64         // ranges (lo, hi] the watermark passed unseen (a replay without since)
	above   map[uint64]struct{} // offsets seen above water
}

// fanRoom is one room's members.
type fanRoom struct {
	n       int
	target  Target
	members []*fanMember
}

// fanout is the shared state of a fanout, kill or drain run.
type fanout struct {
	c        *Config
	rec      *Recorder
	run      uint32
	resume   bool // relay.v1 with reconnects
	rooms    []*fanRoom
	received atomic.Int64 // unique deliveries
	started  time.Time    // when the senders started (sendFor)
	stopping atomic.Bool  // the run is ending: closes are expected
	wg       sync.WaitGroup
	backMu   sync.Mutex
	back     []time.Duration
	// firstDrop and lastBack are when the first member lost its
	// connection and when the last one came back (zero: never); backMu
	// guards them.
	firstDrop, lastBack time.Time
}

func newFanout(c *Config, rec *Recorder, resume bool) *fanout {
	f := &fanout{c: c, rec: rec, run: newRunID(), resume: resume}
	for r := range c.Rooms {
		room := &fanRoom{n: r, target: c.roomTarget(r)}
		frozen := frozenIn(c.Frozen, c.Rooms, r)
		for k := range c.Members {
			id := uint32(c.Proc)<<20 | uint32(r*c.Members+k)
			m := &fanMember{id: id, room: room, recv: map[uint32]*seen{}, frozen: k >= c.Members-frozen}
			room.members = append(room.members, m)
		}
		f.rooms = append(f.rooms, room)
	}
	return f
}

// runFanout connects every member, lets each send c.MsgRate messages per
// second for c.Duration, waits for the messages in flight, and checks
// latency, delivery, duplicates and order.
func runFanout(ctx context.Context, c *Config, rec *Recorder) error {
	f := newFanout(c, rec, false)
	f.connectAll(ctx)
	f.sendFor(ctx, c.Duration)
	f.settle(ctx)
	f.finish()
	f.thaw()
	return nil
}

// connectAll dials every member, paced at c.Rate, and starts its read loop;
// the members are the run's target.
func (f *fanout) connectAll(ctx context.Context) {
	var all []*fanMember
	for _, r := range f.rooms {
		all = append(all, r.members...)
	}
	var opened atomic.Int64
	ramp(ctx, len(all), f.c.Rate, func(i int) {
		m := all[i]
		if conn := f.dial(ctx, m); conn != nil {
			opened.Add(1)
			if m.frozen {
				f.freeze(m, conn)
				return
			}
			f.attach(m, conn)
			return
		}
		m.mu.Lock()
		m.gone = true
		m.mu.Unlock()
	})
	f.rec.Update(func(r *Report) { r.Target, r.Short = int64(len(all)), int64(len(all))-opened.Load() })
}

// dial connects m (relay.v1 with its since when resuming).
func (f *fanout) dial(ctx context.Context, m *fanMember) *Conn {
	t := m.room.target
	d := f.c.Dialer
	if f.resume {
		d.Protocol = relayclient.Subprotocol
		m.mu.Lock()
		since := m.since
		m.mu.Unlock()
		if !since.IsZero() {
			u, err := url.Parse(t.Path)
			if err == nil {
				q := u.Query()
				q.Set("since", since.String())
				u.RawQuery = q.Encode()
				t.Path = u.RequestURI()
			}
		}
	}
	t0 := time.Now()
	conn, err := d.Dial(ctx, t)
	if err != nil {
		if !ended(ctx) {
			f.rec.Fail(Reason(err))
		}
		return nil
	}
	f.rec.Connected(time.Since(t0), conn)
	if f.resume && conn.Protocol != relayclient.Subprotocol {
		conn.Abort()
		f.rec.Update(func(r *Report) { r.FailedBy["no_relay_v1"]++ })
		return nil
	}
	return conn
}

// freeze makes conn frozen member m's connection, read by nobody until
// thaw.
func (f *fanout) freeze(m *fanMember, conn *Conn) {
	m.mu.Lock()
	m.conn = conn
	m.mu.Unlock()
	f.rec.Update(func(r *Report) { r.Frozen++ })
}

// attach makes conn m's connection and starts its read loop.
func (f *fanout) attach(m *fanMember, conn *Conn) {
	f.prepare(m, conn)
	f.wg.Add(1)
	go f.life(m, conn)
}

// prepare makes conn m's connection and resends the writes whose ACK never
// came.
func (f *fanout) prepare(m *fanMember, conn *Conn) {
	m.mu.Lock()
	m.conn = conn
	m.live = false
	m.checked = !m.since.IsZero()
	m.water = m.since.Offset
	m.msgHi, m.ackHi, m.passed = m.water, m.water, nil
	m.above = nil
	resend := m.resend
	m.resend = nil
	buf := make([]byte, 0, f.c.Size)
	for i, seq := range resend {
		buf = AppendMsg(buf[:0], Msg{Run: f.run, Sender: m.id, Flags: FlagResent, Seq: seq, SentNS: time.Now().UnixNano()}, f.c.Size)
		m.unacked = append(m.unacked, seq)
		if conn.Write(wsframe.OpBinary, buf) != nil {
			m.unacked = append(m.unacked, resend[i+1:]...)
			break
		}
	}
	m.mu.Unlock()
	if len(resend) > 0 {
		f.rec.Update(func(r *Report) { r.Resent += int64(len(resend)) })
	}
}

// life runs m's read loop and, when resuming, reconnects after a drop.
func (f *fanout) life(m *fanMember, conn *Conn) {
	defer f.wg.Done()
	for {
		code, _ := conn.ReadLoop(func(op wsframe.Opcode, p []byte) { f.onMessage(m, op, p) })
		m.mu.Lock()
		m.conn = nil
		var gaps int64
		if f.resume {
			gaps = m.gaps()
		}
		m.resend = append(m.resend, m.unacked...)
		m.unacked = nil
		m.mu.Unlock()
		if gaps > 0 {
			f.rec.Update(func(r *Report) { r.Gaps += gaps })
		}
		client := conn.Closing() || f.stopping.Load()
		if !client {
			f.rec.Update(func(r *Report) {
				r.CloseCodes[itoa(code)]++
				if !f.resume {
					r.DroppedBy[itoa(code)]++
				}
			})
		}
		if !f.resume || client {
			return
		}
		dropped := time.Now()
		f.backMu.Lock()
		if f.firstDrop.IsZero() {
			f.firstDrop = dropped
		}
		f.backMu.Unlock()
		if conn = f.reconnect(m); conn == nil {
			m.mu.Lock()
			m.gone = true
			m.mu.Unlock()
			f.rec.Update(func(r *Report) { r.NotBack++ })
			return
		}
		f.rec.r.Reconnect.Hist.Record(time.Since(dropped))
		f.rec.Update(func(r *Report) { r.Back++ })
		f.backMu.Lock()
		f.back = append(f.back, time.Since(dropped))
		f.lastBack = time.Now()
		f.backMu.Unlock()
		f.prepare(m, conn)
	}
}

// reconnect waits a random delay in [0, Window), then tries with jittered
// exponential backoff until GiveUp. It returns nil when giving up or when
// the run ends.
func (f *fanout) reconnect(m *fanMember) *Conn {
	rng := rand.New(rand.NewPCG(f.c.Seed, uint64(m.id)))
	deadline := time.Now().Add(f.c.GiveUp)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	wait := time.Duration(rng.Int64N(int64(f.c.Window)))
	backoff := 100 * time.Millisecond
	for try := 0; try < 1000; try++ {
		if !sleepCtx(ctx, wait) || f.stopping.Load() {
			return nil
		}
		f.rec.Update(func(r *Report) { r.Tries++ })
		if conn := f.dial(ctx, m); conn != nil {
			return conn
		}
		wait = backoff/2 + time.Duration(rng.Int64N(int64(backoff)))
		backoff = min(2*backoff, 2*time.Second)
	}
	return nil
}

// onMessage handles one message on m's read loop.
func (f *fanout) onMessage(m *fanMember, op wsframe.Opcode, p []byte) {
	now := time.Now()
	if f.resume {
		fr, err := relayclient.ParseFrame(p)
		if err != nil {
			f.rec.Update(func(r *Report) { r.FailedBy["bad_frame"]++ })
			return
		}
		switch fr.Kind {
		case relayclient.KindPos:
			m.mu.Lock()
			if m.since.Epoch != string(fr.Body) {
				m.since = relayclient.Since{Epoch: string(fr.Body)}
			}
			m.mu.Unlock()
			return
		case relayclient.KindResync:
			f.rec.Update(func(r *Report) { r.Resyncs++ })
			m.mu.Lock()
			m.since = relayclient.Since{Epoch: string(fr.Body)}
			m.water, m.msgHi, m.ackHi, m.passed, m.above, m.checked = 0, 0, 0, nil, nil, false
			m.mu.Unlock()
			return
		case relayclient.KindLive:
			m.mu.Lock()
			m.live = true
			if !m.checked && m.water == 0 && len(m.above) == 0 {
				// A join without since that replayed nothing: what LIVE
				// stands for is this member's own writes (their ACKs
				// follow) or history no longer retained. Once a replay
				// began, offsets up to LIVE must come, as MSG or ACK.
				m.passed = append(m.passed, [2]uint64{m.water, fr.Offset})
				m.water = fr.Offset
			}
			m.msgHi = max(m.msgHi, fr.Offset, m.water)
			m.since.Offset = m.water
			m.mu.Unlock()
			return
		case relayclient.KindAck:
			m.mu.Lock()
			f.offset(m, fr.Offset, true)
			m.ackHi = max(m.ackHi, fr.Offset)
			if len(m.unacked) > 0 {
				seq := m.unacked[0]
				m.unacked = m.unacked[1:]
				if !m.acked.set(seq) {
					m.nAcked++
				}
			}
			m.mu.Unlock()
			return
		case relayclient.KindMsg:
			m.mu.Lock()
			m.msgHi = max(m.msgHi, fr.Offset)
			f.offset(m, fr.Offset, false)
			m.mu.Unlock()
			p = fr.Body
		}
	}
	msg, err := ParseMsg(p)
	if err != nil || msg.Run != f.run || msg.Sender == m.id {
		return
	}
	f.rec.r.Latency.Hist.Record(msg.Age(now))
	s := m.recv[msg.Sender]
	if s == nil {
		s = &seen{}
		m.recv[msg.Sender] = s
	}
	resent := msg.Flags&FlagResent != 0
	if s.got.set(msg.Seq) {
		if resent || s.resent.has(msg.Seq) {
			f.rec.Update(func(r *Report) { r.DuplicatesResent++ })
		} else {
			f.rec.Update(func(r *Report) { r.Duplicates++ })
		}
		return
	}
	if resent {
		s.resent.set(msg.Seq)
	}
	f.received.Add(1)
	if s.any && msg.Seq < s.hi && !resent {
		f.rec.Update(func(r *Report) { r.OutOfOrder++ })
	}
	if !s.any || msg.Seq > s.hi {
		s.hi, s.any = msg.Seq, true
	}
}

// offset checks a relay.v1 offset (MSG, or ACK when ack) against what this
// connection saw: a repeat is a duplicate offset; the watermark advances
// over contiguous offsets. Called with m.mu held.
func (f *fanout) offset(m *fanMember, off uint64, ack bool) {
	switch {
	case ack && off <= m.water && off > m.ackHi && m.passedUnseen(off):
		// A write of this connection committed before its admission:
		// the replay leaves it out and its ACK comes after LIVE, below
		// where a replay without a since started or where LIVE put the
		// watermark. Not seen before: ACKs come in order.
		return
	case off <= m.water:
		if m.live || m.water != 0 {
			f.rec.Update(func(r *Report) { r.DupOffsets++ })
		}
		return
	case off == m.water+1:
		m.water = off
		for {
			if _, ok := m.above[m.water+1]; !ok {
				break
			}
			delete(m.above, m.water+1)
			m.water++
		}
	default:
		if !m.checked && !m.live && m.water == 0 && len(m.above) == 0 {
			// First frame of a replay without a usable since: start here.
			m.passed = append(m.passed, [2]uint64{0, off - 1})
			m.water = off
			break
		}
		if m.above == nil {
			m.above = map[uint64]struct{}{}
		}
		if _, dup := m.above[off]; dup {
			f.rec.Update(func(r *Report) { r.DupOffsets++ })
		}
		m.above[off] = struct{}{}
	}
	m.since.Offset = m.water
}

// passedUnseen reports whether the watermark passed off without seeing it.
func (m *fanMember) passedUnseen(off uint64) bool {
	for _, r := range m.passed {
		if off > r[0] && off <= r[1] {
			return true
		}
	}
	return false
}

// gaps counts the offsets m's connection missed, once it has ended: those
// below the highest one the room's delivery vouched for (its last MSG, or
// LIVE) that came neither as a MSG nor as an ACK. The relay sends an ACK as
// soon as the write is committed, ahead of the room's delivery, so ACK 40
// may come before MSG 33; a connection that ends between the two has not
// missed 33..39, they were still on their way, and its since (water) asks
// for them again. The other way round, MSG 41 may come before the ACK of
// the member's own 40: such own offsets lie above the last ACK (ACKs come
// in order) and are at most one per write still unacknowledged, so up to
// that many holes above the last ACK are not counted. Called with m.mu
// held.
func (m *fanMember) gaps() int64 {
	missing := func(hi uint64) int64 { // offsets in (water, hi] not seen
		if hi <= m.water {
			return 0
		}
		n := int64(hi - m.water)
		for off := range m.above {
			if off <= hi {
				n--
			}
		}
		return n
	}
	g := missing(m.msgHi)
	if m.ackHi < m.msgHi {
		g -= min(g-missing(m.ackHi), int64(len(m.unacked)))
	}
	return g
}

// sendFor runs every connected member's sender for d.
func (f *fanout) sendFor(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / f.c.MsgRate)
	f.started = time.Now()
	for _, r := range f.rooms {
		for _, m := range r.members {
			if m.frozen {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.send(ctx, m, interval)
			}()
		}
	}
	wg.Wait()
}

// send writes one message every interval (first one after a random part
// of it) while m is connected.
func (f *fanout) send(ctx context.Context, m *fanMember, interval time.Duration) {
	rng := rand.New(rand.NewPCG(f.c.Seed^0x5eed, uint64(m.id)))
	next := time.Now().Add(time.Duration(rng.Int64N(int64(interval) + 1)))
	buf := make([]byte, 0, f.c.Size)
	for sleepCtx(ctx, time.Until(next)) {
		next = next.Add(interval)
		m.mu.Lock()
		if m.conn != nil && len(m.resend) == 0 {
			seq := m.seq
			buf = AppendMsg(buf[:0], Msg{Run: f.run, Sender: m.id, Seq: seq, SentNS: time.Now().UnixNano()}, f.c.Size)
			if f.resume {
				m.unacked = append(m.unacked, seq)
			}
			if err := m.conn.Write(wsframe.OpBinary, buf); err == nil || f.resume {
				m.seq++
			}
		}
		m.mu.Unlock()
	}
}

// settle waits until every message sent was delivered (and acknowledged
// when resuming), or c.Settle passed.
func (f *fanout) settle(ctx context.Context) {
	deadline := time.Now().Add(f.c.Settle)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		exp, _ := f.expected()
		if f.received.Load() >= exp && f.pendingAcks() == 0 {
			return
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// pendingAcks counts writes waiting for an ACK or a resend.
func (f *fanout) pendingAcks() int {
	if !f.resume {
		return 0
	}
	n := 0
	for _, r := range f.rooms {
		for _, m := range r.members {
			m.mu.Lock()
			n += len(m.unacked) + len(m.resend)
			m.mu.Unlock()
		}
	}
	return n
}

// expected returns the deliveries expected so far (every other member of
// the room that is not frozen gets every message of every member that
// connected) and the distinct messages sent.
func (f *fanout) expected() (exp, sent int64) {
	for _, r := range f.rooms {
		var roomSent int64
		readers := len(r.members)
		for _, m := range r.members {
			m.mu.Lock()
			roomSent += int64(m.seq)
			m.mu.Unlock()
			if m.frozen {
				readers--
			}
		}
		sent += roomSent
		exp += roomSent * int64(readers-1)
	}
	return exp, sent
}

// finish closes every member but the frozen ones, waits for the read
// loops and fills the report.
func (f *fanout) finish() {
	f.stopping.Store(true)
	for _, r := range f.rooms {
		for _, m := range r.members {
			m.mu.Lock()
			if m.conn != nil && !m.frozen {
				m.conn.Close(1000, 2*time.Second)
			}
			m.mu.Unlock()
		}
	}
	f.wg.Wait()
	exp, sent := f.expected()
	var lost, acked int64
	if f.resume {
		for _, r := range f.rooms {
			for _, s := range r.members {
				acked += s.nAcked
				// Writes never acknowledged and never resent.
				lost += int64(len(s.unacked) + len(s.resend))
				for q := uint64(0); q < s.seq; q++ {
					if !s.acked.has(q) {
						continue
					}
					for _, m := range r.members {
						if m == s {
							continue
						}
						if st := m.recv[s.id]; st == nil || !st.got.has(q) {
							lost++
						}
					}
				}
			}
		}
	}
	f.rec.Update(func(r *Report) {
		r.Sent += sent
		r.Expected += exp
		r.Received += f.received.Load()
		r.Acked += acked
		r.LostWrites += lost
	})
}

// thaw reads each frozen member's socket for c.Settle, all at once, once
// the others are closed: it counts the run's messages found there, notes
// how the connection was found (open, or the close code that ended it) and
// when the newest message found was sent, then closes it.
func (f *fanout) thaw() {
	var wg sync.WaitGroup
	for _, r := range f.rooms {
		for _, m := range r.members {
			m.mu.Lock()
			conn := m.conn
			m.conn = nil
			m.mu.Unlock()
			if !m.frozen || conn == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.thawOne(conn)
			}()
		}
	}
	wg.Wait()
}

// thawOne reads one frozen member's connection until it ends or c.Settle
// passed, and records what it found.
func (f *fanout) thawOne(conn *Conn) {
	var got int64
	var newest int64 // SentNS of the newest message found
	_ = conn.SetReadDeadline(time.Now().Add(f.c.Settle))
	code, err := conn.ReadLoop(func(_ wsframe.Opcode, p []byte) {
		if msg, err := ParseMsg(p); err == nil && msg.Run == f.run {
			got++
			newest = max(newest, msg.SentNS)
		}
	})
	ended := frozenEnd(code, err)
	f.rec.Update(func(r *Report) {
		r.FrozenReceived += got
		r.FrozenEnded[ended]++
		if newest > 0 {
			r.FrozenLastSentMS = max(r.FrozenLastSentMS, ms(time.Unix(0, newest).Sub(f.started)))
		}
	})
}

// frozenEnd names how ReadLoop found a frozen member's connection: "open"
// when the read's deadline passed (the connection neither closed nor
// ended), else the close code (CloseAbnormal for an end without a close
// frame).
func frozenEnd(code uint16, err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "open"
	}
	return itoa(code)
}

func itoa(code uint16) string { return strconv.Itoa(int(code)) }
