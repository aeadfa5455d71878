package roomlog

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/relay-backend/bus"
)

// MemoryOptions configures a Memory log.
type MemoryOptions struct {
	// History is how many messages a room retains; like MAXLEN ~, up to
	// twice as many may stay before a trim (default 1000 messages).
	History int
	// TTL is how long a room is kept after its last message (default 24h).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Memory is a room log in process memory with the semantics of Redis: it
// publishes every committed message on its bus, in offset order, while it
// still holds the room, so subscribers of one process see offsets in order.
// Memory is safe for concurrent use and must not be copied.
type Memory struct {
	pub     bus.Bus
	history int
	ttl     time.Duration
	now     func() time.Time

	mu     sync.Mutex
	rooms  map[string]*memRoom
	closed bool
}

type memRoom struct {
	pos     Position
	entries []Entry // the newest, in offset order
	touched time.Time
}

// NewMemory returns an empty log that publishes on pub, whose subscription
// handlers must not call back into the log.
func NewMemory(pub bus.Bus, o MemoryOptions) *Memory {
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Memory{pub: pub, history: o.History, ttl: o.TTL, now: o.Now, rooms: make(map[string]*memRoom)}
}

// sharedKey names the log hung on a bus.Memory by Shared.
type sharedKey struct{}

// Shared returns the one Memory log of every replica on the in-process bus
// b, creating it with o on first use; later calls ignore o. Relays of one
// process that share a bus.Memory share their room log through it.
func Shared(b *bus.Memory, o MemoryOptions) *Memory {
	return b.Shared(sharedKey{}, func() any { return NewMemory(b.Endpoint(), o) }).(*Memory)
}

// room returns room's state, starting a new epoch when it has none or it
// expired. It also forgets up to two other expired rooms, so idle rooms do
// not pile up. m.mu must be held.
func (m *Memory) room(id string, now time.Time) *memRoom {
	n := 0
	for k, r := range m.rooms {
		if n == 2 {
			break
		}
		n++
		if k != id && now.Sub(r.touched) > m.ttl {
			delete(m.rooms, k)
		}
	}
	r := m.rooms[id]
	if r == nil || now.Sub(r.touched) > m.ttl {
		r = &memRoom{pos: Position{Epoch: NewEpoch()}, touched: now}
		m.rooms[id] = r
	}
	return r
}

// Append commits data to room and publishes it; it returns the entry's
// position. data is retained: the caller must not modify it afterwards.
func (m *Memory) Append(ctx context.Context, room string, data []byte) (Position, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Position{}, ErrClosed
	}
	now := m.now()
	r := m.room(room, now)
	r.touched = now
	r.pos.Offset++
	e := Entry{Epoch: r.pos.Epoch, Offset: r.pos.Offset, Data: data}
	r.entries = append(r.entries, e)
	if len(r.entries) >= 2*m.history {
		r.entries = append([]Entry(nil), r.entries[len(r.entries)-m.history:]...)
	}
	// A failed publish leaves the entry committed; subscribers repair the
	// gap from Range on their next message.
	_ = m.pub.Publish(ctx, room, FormatMessage(nil, e))
	return r.pos, nil
}

// Position returns room's epoch and last committed offset.
func (m *Memory) Position(_ context.Context, room string) (Position, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Position{}, ErrClosed
	}
	return m.room(room, m.now()).pos, nil
}

// Range returns the room's position and its retained entries with offsets
// above after, in order.
func (m *Memory) Range(_ context.Context, room string, after uint64) (Position, []Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Position{}, nil, ErrClosed
	}
	r := m.room(room, m.now())
	var out []Entry
	for i, e := range r.entries {
		if e.Offset > after {
			out = append(out, r.entries[i:]...)
			break
		}
	}
	return r.pos, out, nil
}

// Drop forgets room, as if its keys had expired: its next use starts a new
// epoch.
func (m *Memory) Drop(room string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rooms, room)
}

// Rooms returns the number of rooms held.
func (m *Memory) Rooms() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rooms)
}

// Close drops every room; later calls return ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	clear(m.rooms)
	return nil
}
