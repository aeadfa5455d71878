package relay

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// roomQueue bounds the entries waiting for a room's delivery goroutine;
// beyond it entries are dropped and the goroutine repairs from the log.
const roomQueue = 4096

// room is one room id with at least one local member. Delivery is ordered
// by one goroutine per room (runRoom), the only one that reads or writes
// epoch and last and that fans out: entries from the bus and from local
// senders, gap repairs and the admission of joining members all go through
// its queue, so a member gets every offset once and in order without locks
// on the delivery path beyond the queue's.
type room struct {
	id       string
	ready    chan struct{} // closed once sub is settled and runRoom started
	sub      bus.Subscription
	quit     chan struct{} // closed by the last member out
	loopDone chan struct{}
	count    int // members joined or joining; guarded by Relay.mu

	qmu     sync.Mutex
	entries []roomlog.Entry
	joins   []*member
	gap     bool          // entries were dropped or a resubscribe happened
	wake    chan struct{} // capacity 1

	mu      sync.RWMutex
	members map[uint64]*member // admitted members

	// Owned by runRoom.
	epoch  string // "" until the first admission read the position
	last   uint64 // last offset delivered to the members
	recent []sent // what was delivered at the last offsets; nil until the first
	unsure bool   // an entry came at a delivered offset older than recent
}

// recentOffsets is how many of the last delivered offsets a room remembers
// a hash of, to tell a duplicate (the local push and the bus echo of one
// commit) from another message at an offset already delivered (the log
// went back: Redis lost its tail).
const recentOffsets = 256

// sent is one remembered delivery: offset and a hash of the entry's data.
type sent struct{ off, sum uint64 }

var sumSeed = maphash.MakeSeed()

func entrySum(e roomlog.Entry) uint64 { return maphash.Bytes(sumSeed, e.Data) }

// remember records that e was delivered at its offset.
func (rm *room) remember(e roomlog.Entry) {
	if rm.recent == nil {
		rm.recent = make([]sent, recentOffsets)
	}
	rm.recent[e.Offset%recentOffsets] = sent{e.Offset, entrySum(e)}
}

// sumAt returns the hash of what was delivered at off, if remembered.
func (rm *room) sumAt(off uint64) (uint64, bool) {
	if rm.recent == nil || off == 0 {
		return 0, false
	}
	s := rm.recent[off%recentOffsets]
	return s.sum, s.off == off
}

// delivered reports whether e is known to be what was delivered at its offset.
func (rm *room) delivered(e roomlog.Entry) bool {
	sum, ok := rm.sumAt(e.Offset)
	return ok && sum == entrySum(e)
}

// outMsg is one message on its way to members; data is shared, read-only.
type outMsg struct {
	typ  int
	data []byte
}

var errDraining = errors.New("relay is draining")

// errBusDown is returned by join while the bus cannot reach its server.
var errBusDown = errors.New("bus is down")

// errRoomFull is returned by join when the room has MaxMembers members.
var errRoomFull = errors.New("room is full")

func newRoom(id string) *room {
	return &room{
		id:       id,
		ready:    make(chan struct{}),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
		wake:     make(chan struct{}, 1),
		members:  make(map[uint64]*member),
	}
}

// push queues a committed entry for delivery; it never blocks.
func (rm *room) push(e roomlog.Entry) {
	rm.qmu.Lock()
	if len(rm.entries) >= roomQueue {
		rm.gap = true
	} else {
		rm.entries = append(rm.entries, e)
	}
	rm.qmu.Unlock()
	rm.signal()
}

// markGap asks runRoom to repair from the log.
func (rm *room) markGap() {
	rm.qmu.Lock()
	rm.gap = true
	rm.qmu.Unlock()
	rm.signal()
}

func (rm *room) admitLater(m *member) {
	rm.qmu.Lock()
	rm.joins = append(rm.joins, m)
	rm.qmu.Unlock()
	rm.signal()
}

func (rm *room) signal() {
	select {
	case rm.wake <- struct{}{}:
	default:
	}
}

func (rm *room) take() ([]roomlog.Entry, []*member, bool) {
	rm.qmu.Lock()
	defer rm.qmu.Unlock()
	es, js, gap := rm.entries, rm.joins, rm.gap
	rm.entries, rm.joins, rm.gap = nil, nil, false
	return es, js, gap
}

// join registers m and queues its admission to its room, creating the room,
// its bus subscription and its delivery goroutine when m is the first local
// member. The room is subscribed before anyone reads its position, so no
// committed message falls between the two.
func (r *Relay) join(m *member, roomID string) error {
	r.mu.Lock()
	if r.draining.Load() {
		r.mu.Unlock()
		return errDraining
	}
	if r.busDown.Load() {
		r.mu.Unlock()
		return errBusDown
	}
	rm := r.rooms[roomID]
	if rm != nil && rm.count >= r.opt.MaxMembers {
		r.mu.Unlock()
		return errRoomFull
	}
	r.members[m.id] = m
	creator := rm == nil
	if creator {
		rm = newRoom(roomID)
		r.rooms[roomID] = rm
	}
	rm.count++
	m.room = rm
	r.mu.Unlock()

	if creator {
		ctx, cancel := context.WithTimeout(r.ctx, subscribeTimeout)
		sub, err := r.bus.Subscribe(ctx, roomID, func(_ string, msg []byte) { r.fromBus(rm, msg) })
		cancel()
		if err != nil {
			r.countBusError("subscribe", err)
		}
		if sub != nil {
			rm.sub = sub
			r.subs.Add(1)
		}
		go r.runRoom(rm)
		close(rm.ready)
	}
	<-rm.ready
	rm.admitLater(m)
	return nil
}

// leave removes m from its room and the registry; the last member out of a
// room stops its goroutine and drops its bus subscription.
func (r *Relay) leave(m *member) {
	rm := m.room
	r.mu.Lock()
	delete(r.members, m.id)
	rm.count--
	empty := rm.count == 0
	if empty {
		delete(r.rooms, rm.id)
	}
	if len(r.members) == 0 && r.drained != nil {
		close(r.drained)
		r.drained = nil
	}
	r.mu.Unlock()
	rm.mu.Lock()
	delete(rm.members, m.id)
	m.gone = true
	rm.mu.Unlock()
	if !empty {
		return
	}
	<-rm.ready
	close(rm.quit)
	<-rm.loopDone
	if rm.sub != nil {
		if err := rm.sub.Close(); err != nil {
			r.countBusError("unsubscribe", err)
		}
		r.subs.Add(-1)
	}
}

// fromBus hands a published entry, or a resubscribe's gap marker, to the
// room's delivery goroutine.
func (r *Relay) fromBus(rm *room, msg []byte) {
	if msg == nil {
		rm.markGap()
		return
	}
	e, err := roomlog.ParseMessage(msg)
	if err != nil {
		r.countBusError("decode", err)
		return
	}
	rm.push(e)
}

// runRoom is rm's delivery goroutine; see room.
func (r *Relay) runRoom(rm *room) {
	defer close(rm.loopDone)
	for {
		select {
		case <-rm.quit:
			return
		case <-rm.wake:
		}
		entries, joins, gap := rm.take()
		for _, e := range entries {
			r.deliver(rm, e)
		}
		if gap && rm.epoch != "" {
			r.repairs.Add(1)
		}
		if (gap || rm.unsure) && rm.epoch != "" {
			// One read of the log checks every unsure entry of the batch.
			r.catchUp(rm, false)
		}
		rm.unsure = false
		for _, m := range joins {
			r.admit(rm, m)
		}
	}
}

// deliver fans e out if it is the next offset, drops it if it was
// delivered, and repairs from the log first if offsets are missing or e is
// of another epoch. An entry at an offset already delivered that is not the
// message delivered there means the log went back (Redis lost its tail and
// reused the offsets): the room is resynced from the log.
func (r *Relay) deliver(rm *room, e roomlog.Entry) {
	switch {
	case rm.epoch == "":
		// Nobody admitted yet: the first admission reads the position.
	case e.Epoch != rm.epoch || e.Offset > rm.last+1:
		r.repairs.Add(1)
		r.catchUp(rm, false)
	case e.Offset == rm.last+1:
		r.fanout(rm, e, time.Time{}, false)
		rm.last = e.Offset
		rm.remember(e)
	default:
		sum, ok := rm.sumAt(e.Offset)
		switch {
		case ok && sum == entrySum(e):
			// The same commit again (the local push and the bus echo).
		case ok:
			r.repairs.Add(1)
			r.catchUp(rm, true)
		default:
			// Older than what is remembered: the log tells whether it
			// went back, once the batch is delivered.
			rm.unsure = true
		}
	}
}

// catchUp delivers what the log committed after rm.last. If the room's
// epoch changed (Redis lost the room), the log no longer holds the next
// offset, or its offsets went back within the epoch (Redis lost the tail of
// the log on a failover and reused the offsets: the log ends below rm.last,
// holds another message at rm.last, or rewound says deliver saw another
// message at an offset already delivered), relay.v1 members get RESYNC, the
// retained entries, then LIVE. After a rewind, plain members get the
// entries after the last one they are known to have got.
func (r *Relay) catchUp(rm *room, rewound bool) bool {
	ctx, cancel := context.WithTimeout(r.ctx, logTimeout)
	defer cancel()
	var pos roomlog.Position
	var entries []roomlog.Entry
	var err error
	if !rewound {
		// From the last delivered offset, to check it is still there.
		pos, entries, err = r.roomLog.Range(ctx, rm.id, max(rm.last, 1)-1)
		if err == nil && pos.Epoch == rm.epoch {
			rewound = pos.Offset < rm.last || rm.replaced(entries)
		}
	}
	resync := false
	var kept uint64 // plain members got every entry up to kept
	if err == nil && (rewound || pos.Epoch != rm.epoch) {
		from := rm.last
		pos, entries, err = r.roomLog.Range(ctx, rm.id, 0)
		if err == nil {
			if rewound && pos.Epoch == rm.epoch {
				kept = rm.lastKnown(entries)
				n := r.rewinds.Add(1)
				r.log.Warn("room log went back within its epoch, resyncing the room",
					"room", rm.id, "delivered", from, "log", pos.Offset, "rewinds", n)
			}
			rm.epoch, rm.last, rm.recent, resync = pos.Epoch, 0, nil, true
		}
	}
	if err != nil {
		r.countLogError("range", rm.id, err)
		rm.qmu.Lock()
		rm.gap = true // retried on the room's next event
		rm.qmu.Unlock()
		return false
	}
	if pos.Offset > rm.last && firstAfter(entries, rm.last) != rm.last+1 {
		resync = true // trimmed past rm.last
	}
	if resync {
		r.toV1(rm, outMsg{websocket.BinaryMessage, relayclient.AppendFrame(nil,
			relayclient.Frame{Kind: relayclient.KindResync, Body: []byte(rm.epoch)})})
	}
	// A repair can hand a member more than its whole send queue at once;
	// it waits for room (up to WriteTimeout for the whole repair) instead
	// of closing a member that is reading.
	patience := time.Now().Add(r.opt.WriteTimeout)
	for _, e := range entries {
		if e.Offset > rm.last && e.Offset <= pos.Offset {
			r.fanout(rm, e, patience, e.Offset <= kept)
			rm.last = e.Offset
			rm.remember(e)
		}
	}
	rm.last = max(rm.last, pos.Offset) // entries the log lost are not waited for
	if resync {
		r.toV1(rm, outMsg{websocket.BinaryMessage, relayclient.AppendFrame(nil,
			relayclient.Frame{Kind: relayclient.KindLive, Offset: rm.last})})
	}
	return true
}

// replaced reports whether entries, read from the log from rm.last on,
// hold another message at rm.last than the one delivered there.
func (rm *room) replaced(entries []roomlog.Entry) bool {
	for _, e := range entries {
		if e.Offset == rm.last {
			sum, ok := rm.sumAt(e.Offset)
			return ok && sum != entrySum(e)
		}
	}
	return false
}

// lastKnown returns the highest offset among entries whose message is the
// one delivered at that offset: the log lost only a tail, so everything up
// to it was delivered as the log holds it (0 when none is remembered).
func (rm *room) lastKnown(entries []roomlog.Entry) uint64 {
	for i := len(entries) - 1; i >= 0; i-- {
		if rm.delivered(entries[i]) {
			return entries[i].Offset
		}
	}
	return 0
}

// firstAfter returns the first offset in entries above after (0 if none).
func firstAfter(entries []roomlog.Entry, after uint64) uint64 {
	for _, e := range entries {
		if e.Offset > after {
			return e.Offset
		}
	}
	return 0
}

// admit brings the room up to date, gives m its preamble (POS, RESYNC,
// replay, LIVE for relay.v1; the retained history for plain members) and
// makes it a receiver of everything after rm.last.
func (r *Relay) admit(rm *room, m *member) {
	defer m.markAdmitted()
	rm.mu.RLock()
	gone := m.gone
	rm.mu.RUnlock()
	if gone {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, logTimeout)
	defer cancel()
	if rm.epoch == "" {
		pos, err := r.roomLog.Position(ctx, rm.id)
		if err != nil {
			r.refuse(rm, m, "position", err)
			return
		}
		rm.epoch, rm.last = pos.Epoch, pos.Offset
	} else if !r.catchUp(rm, false) {
		r.refuse(rm, m, "range", errors.New("room log unavailable"))
		return
	}

	var from uint64
	resync := false
	if m.v1 && !m.since.IsZero() {
		if m.since.Epoch == rm.epoch && m.since.Offset <= rm.last {
			from = m.since.Offset
		} else {
			resync = true
		}
	}
	var entries []roomlog.Entry
	if from < rm.last {
		pos, es, err := r.roomLog.Range(ctx, rm.id, from)
		if err == nil && pos.Epoch != rm.epoch {
			err = errors.New("epoch changed during the join")
		}
		if err != nil {
			r.refuse(rm, m, "range", err)
			return
		}
		for _, e := range es {
			if e.Offset <= rm.last {
				entries = append(entries, e)
			}
		}
		if from > 0 && (len(entries) == 0 || entries[0].Offset != from+1) {
			resync = true // trimmed past since
		}
	}

	var pre []outMsg
	if m.v1 {
		pre = make([]outMsg, 0, len(entries)+3)
		pre = append(pre, v1Frame(relayclient.KindPos, 0, rm.last, []byte(rm.epoch)))
		if resync {
			pre = append(pre, v1Frame(relayclient.KindResync, 0, 0, []byte(rm.epoch)))
		}
	}
	for _, e := range entries {
		env, err := parseEnvelope(e.Data)
		if err != nil {
			r.countBusError("decode", err)
			continue
		}
		if env.origin == r.origin && env.member == m.id {
			continue // m sent it before its admission: never echoed
		}
		switch {
		case m.v1:
			pre = append(pre, v1Frame(relayclient.KindMsg, byte(env.typ), e.Offset, env.data))
		case r.plainSafe(env):
			pre = append(pre, outMsg{env.typ, env.data})
		}
	}
	if m.v1 {
		pre = append(pre, v1Frame(relayclient.KindLive, 0, rm.last, nil))
	}
	rm.mu.Lock()
	if !m.gone {
		m.preamble = pre
		rm.members[m.id] = m
	}
	rm.mu.Unlock()
}

// refuse closes a member whose admission failed on the room log.
func (r *Relay) refuse(rm *room, m *member, op string, err error) {
	r.countLogError(op, rm.id, err)
	m.kick(websocket.CloseInternalServerErr, "room log unavailable")
}

func v1Frame(k relayclient.Kind, typ byte, off uint64, body []byte) outMsg {
	b := relayclient.AppendFrame(make([]byte, 0, relayclient.HeaderLen+len(body)),
		relayclient.Frame{Kind: k, Type: typ, Offset: off, Body: body})
	return outMsg{websocket.BinaryMessage, b}
}

// fanout queues e for every admitted member of rm except its sender, or
// only for its relay.v1 members with v1Only. With a zero patience it never
// blocks; otherwise a full queue is waited on until that time.
func (r *Relay) fanout(rm *room, e roomlog.Entry, patience time.Time, v1Only bool) {
	env, err := parseEnvelope(e.Data)
	if err != nil {
		r.countBusError("decode", err)
		return
	}
	own := env.origin == r.origin
	plain := outMsg{env.typ, env.data}
	toPlain := !v1Only && r.plainSafe(env)
	var v1 outMsg
	pick := func(p *member) (outMsg, bool) {
		if !p.v1 {
			return plain, toPlain
		}
		if v1.data == nil {
			v1 = v1Frame(relayclient.KindMsg, byte(env.typ), e.Offset, env.data)
		}
		return v1, true
	}
	if patience.IsZero() {
		rm.mu.RLock()
		defer rm.mu.RUnlock()
		for id, p := range rm.members {
			if own && id == env.member {
				continue
			}
			if msg, ok := pick(p); ok {
				r.enqueue(p, msg)
			}
		}
		return
	}
	// Waiting must not hold rm.mu: a leaving member takes it.
	rm.mu.RLock()
	list := make([]*member, 0, len(rm.members))
	for id, p := range rm.members {
		if !own || id != env.member {
			list = append(list, p)
		}
	}
	rm.mu.RUnlock()
	for _, p := range list {
		msg, ok := pick(p)
		if !ok {
			continue
		}
		if time.Until(patience) > 0 && !p.kicked.Load() && p.offerUntil(msg, patience) {
			continue
		}
		r.enqueue(p, msg)
	}
}

// plainSafe reports whether env may be sent to a plain member as it is: not
// a text message that is not valid UTF-8, which the relay refuses from
// clients but an older relay may have stored (a browser fails its whole
// connection on such a frame). relay.v1 members get every message inside a
// binary frame, so it cannot break their connection.
func (r *Relay) plainSafe(env envelope) bool {
	if env.typ != websocket.TextMessage || utf8.Valid(env.data) {
		return true
	}
	r.invalidText.Add(1)
	return false
}

// toV1 queues msg for every admitted relay.v1 member of rm.
func (r *Relay) toV1(rm *room, msg outMsg) {
	rm.mu.RLock()
	defer rm.mu.RUnlock()
	for _, p := range rm.members {
		if p.v1 {
			r.enqueue(p, msg)
		}
	}
}

// enqueue puts msg on p's send queue, or closes p as a slow consumer when the
// queue is full.
func (r *Relay) enqueue(p *member, msg outMsg) {
	if !p.offer(msg) && p.kick(closeTryAgainLater, "slow consumer") {
		r.slowClosed.Add(1)
		r.log.Info("closed slow consumer", "client", p.id, "room", p.room.id, "queue", r.opt.SendQueue)
	}
}
