package relay

import (
	"context"
	"errors"
	"sync"
)

// room is the set of local members of one room id. Its bus subscription is
// taken by the member that created it and dropped by the member that empties
// it.
type room struct {
	id    string
	ready chan struct{} // closed once sub is settled
	sub   interface{ Close() error }

	mu      sync.RWMutex
	members map[uint64]*member
}

// outMsg is one message on its way to members; data is shared, read-only.
type outMsg struct {
	typ  int
	data []byte
}

var errDraining = errors.New("relay is draining")

// join registers m and adds it to its room, creating the room and taking its
// bus subscription when m is the first local member. It returns once the
// subscription is settled, so a joined member misses no bus message.
func (r *Relay) join(m *member, roomID string) error {
	r.mu.Lock()
	if r.draining.Load() {
		r.mu.Unlock()
		return errDraining
	}
	r.members[m.id] = m
	rm := r.rooms[roomID]
	creator := rm == nil
	if creator {
		rm = &room{id: roomID, ready: make(chan struct{}), members: make(map[uint64]*member)}
		r.rooms[roomID] = rm
	}
	m.room = rm // before m is visible to fan-out, which reads it
	rm.mu.Lock()
	rm.members[m.id] = m
	rm.mu.Unlock()
	r.mu.Unlock()

	if !creator {
		<-rm.ready
		return nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, subscribeTimeout)
	defer cancel()
	sub, err := r.bus.Subscribe(ctx, roomID, func(_ string, msg []byte) { r.fromBus(rm, msg) })
	if err != nil {
		r.countBusError("subscribe", err)
	}
	if sub != nil {
		rm.sub = sub
		r.subs.Add(1)
	}
	close(rm.ready)
	return nil
}

// leave removes m from its room and the registry; the last member out of a
// room removes it and drops its bus subscription.
func (r *Relay) leave(m *member) {
	rm := m.room
	r.mu.Lock()
	delete(r.members, m.id)
	rm.mu.Lock()
	delete(rm.members, m.id)
	empty := len(rm.members) == 0
	rm.mu.Unlock()
	if empty {
		delete(r.rooms, rm.id)
	}
	if len(r.members) == 0 && r.drained != nil {
		close(r.drained)
		r.drained = nil
	}
	r.mu.Unlock()
	if !empty {
		return
	}
	<-rm.ready
	if rm.sub != nil {
		if err := rm.sub.Close(); err != nil {
			r.countBusError("unsubscribe", err)
		}
		r.subs.Add(-1)
	}
}

// fanout queues msg for every local member of rm except the one with id from
// (0 excludes nobody). It never blocks.
func (r *Relay) fanout(rm *room, from uint64, msg outMsg) {
	rm.mu.RLock()
	defer rm.mu.RUnlock()
	for id, p := range rm.members {
		if id != from {
			r.enqueue(p, msg)
		}
	}
}

// enqueue puts msg on p's send queue, or closes p as a slow consumer when the
// queue is full.
func (r *Relay) enqueue(p *member, msg outMsg) {
	select {
	case p.queue <- msg:
	default:
		if p.kick(closeTryAgainLater, "slow consumer") {
			r.slowClosed.Add(1)
			r.log.Info("closed slow consumer", "client", p.id, "room", p.room.id, "queue", cap(p.queue))
		}
	}
}

// publish sends one frame from a local member to the other replicas.
func (r *Relay) publish(rm *room, msg outMsg) {
	env := appendEnvelope(make([]byte, 0, envelopeHeader+len(msg.data)), r.origin, msg.typ, msg.data)
	if err := r.bus.Publish(r.ctx, rm.id, env); err != nil && r.ctx.Err() == nil {
		r.countBusError("publish", err)
	}
}

// fromBus delivers a message from the bus to every local member of rm, unless
// this relay published it itself.
func (r *Relay) fromBus(rm *room, b []byte) {
	e, err := parseEnvelope(b)
	if err != nil {
		r.countBusError("decode", err)
		return
	}
	if e.origin == r.origin {
		return
	}
	r.fanout(rm, 0, outMsg{typ: e.typ, data: e.data})
}
