package bus

import (
	"context"
	"sync"
)

// Memory is an in-process bus shared by several replicas of one process. Each
// replica takes its own Endpoint; a message published on any endpoint reaches
// the subscriptions of every endpoint, the publisher's included, which is what
// Redis pub/sub does too. Delivery is synchronous: Publish returns after every
// handler ran. Memory is safe for concurrent use and must not be copied.
type Memory struct {
	sharedMu sync.Mutex
	shared   map[any]any

	mu     sync.RWMutex
	rooms  map[string]map[*memorySub]struct{}
	count  int
	closed bool
}

// NewMemory returns an empty in-process bus.
func NewMemory() *Memory {
	return &Memory{rooms: make(map[string]map[*memorySub]struct{})}
}

// Endpoint returns a Bus view of m for one replica. Endpoints are cheap; each
// counts its own subscriptions.
func (m *Memory) Endpoint() *MemoryEndpoint {
	return &MemoryEndpoint{m: m}
}

// Shared returns the value stored under key, creating it with create on first
// use. It lets state that every replica on this bus must share (the
// in-process room log) live as long as the bus does.
func (m *Memory) Shared(key any, create func() any) any {
	m.sharedMu.Lock()
	defer m.sharedMu.Unlock()
	if v, ok := m.shared[key]; ok {
		return v
	}
	if m.shared == nil {
		m.shared = make(map[any]any)
	}
	v := create()
	m.shared[key] = v
	return v
}

// Subscriptions returns the number of live subscriptions over all endpoints.
func (m *Memory) Subscriptions() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.count
}

// Close drops every subscription; later Publish and Subscribe calls return
// ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	clear(m.rooms)
	m.count = 0
	return nil
}

func (m *Memory) publish(room string, msg []byte) error {
	if msg == nil {
		msg = []byte{} // nil is the gap marker
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	for s := range m.rooms[room] {
		s.h(room, msg)
	}
	return nil
}

func (m *Memory) subscribe(e *MemoryEndpoint, room string, h Handler) (*memorySub, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	s := &memorySub{e: e, room: room, h: h}
	set := m.rooms[room]
	if set == nil {
		set = make(map[*memorySub]struct{})
		m.rooms[room] = set
	}
	set[s] = struct{}{}
	m.count++
	e.count++
	return s, nil
}

func (m *Memory) unsubscribe(s *memorySub) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.rooms[s.room]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(m.rooms, s.room)
	}
	m.count--
	s.e.count--
}

// MemoryEndpoint is one replica's view of a Memory bus. It is safe for
// concurrent use.
type MemoryEndpoint struct {
	m     *Memory
	count int // guarded by m.mu
}

// Bus returns the Memory bus e belongs to.
func (e *MemoryEndpoint) Bus() *Memory { return e.m }

// Publish delivers msg to every subscription on room, on every endpoint.
func (e *MemoryEndpoint) Publish(_ context.Context, room string, msg []byte) error {
	return e.m.publish(room, msg)
}

// Subscribe registers h for messages on room.
func (e *MemoryEndpoint) Subscribe(_ context.Context, room string, h Handler) (Subscription, error) {
	s, err := e.m.subscribe(e, room, h)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Subscriptions returns the number of live subscriptions taken through e.
func (e *MemoryEndpoint) Subscriptions() int {
	e.m.mu.RLock()
	defer e.m.mu.RUnlock()
	return e.count
}

type memorySub struct {
	e    *MemoryEndpoint
	room string
	h    Handler
}

func (s *memorySub) Close() error {
	s.e.m.unsubscribe(s)
	return nil
}

var (
	_ Bus          = (*MemoryEndpoint)(nil)
	_ Subscription = (*memorySub)(nil)
)
