package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/wsgate/wsgate/internal/fastlog"
	"github.com/wsgate/wsgate/internal/h2serve"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relayclient"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// Options configures a Relay. The zero value is usable.
type Options struct {
	// ID names the replica in /info and in hello frames (default "relay").
	ID string
	// Bus carries committed messages to the other replicas (default: a
	// private in-process bus, i.e. a single replica).
	Bus bus.Bus
	// Log commits every message and publishes it on Bus (default: the
	// in-process log shared by every relay on the same bus.Memory, see
	// roomlog.Shared; with any other Bus, a private in-process log, which
	// is only right for a single replica: replicas on Redis need a
	// roomlog.Redis on the same server).
	Log Log
	// MaxMembers is how many members one room may have on this replica;
	// the next join is answered 503 before the upgrade (default 10000).
	MaxMembers int
	// Weight is announced to the gateway's health checker in the
	// Wsgate-Agent header of /healthz, 1 to 1000 (default 0: not announced).
	Weight int
	// RoomPrefix is the path before the room id (default "/room/").
	RoomPrefix string
	// SendQueue is how many messages may wait for one slow member before it
	// is closed with 1013 (default 256 messages).
	SendQueue int
	// MaxMessage is the largest message accepted from a client; a bigger one
	// closes that client with 1009 (default 1 MiB, in bytes).
	MaxMessage int64
	// WriteTimeout bounds each write to a client, and how long a closing
	// client gets to answer the close (default 10s).
	WriteTimeout time.Duration
	// DrainWindow is the window over which Drain spreads its 1001 closes
	// (default 5s).
	DrainWindow time.Duration
	// Logger receives the relay's log lines (default slog.Default()).
	Logger *slog.Logger
	// H2MaxStreams is how many WebSockets one HTTP/2 connection may carry
	// at once, advertised as SETTINGS_MAX_CONCURRENT_STREAMS; a stream
	// beyond it is refused with RST_STREAM(REFUSED_STREAM) (default 1000).
	H2MaxStreams int
}

// Defaults of Options, applied by New to zero fields.
const (
	DefaultID           = "relay"
	DefaultRoomPrefix   = "/room/"
	DefaultSendQueue    = 256
	DefaultMaxMessage   = 1 << 20
	DefaultWriteTimeout = 10 * time.Second
	DefaultDrainWindow  = 5 * time.Second
	DefaultMaxMembers   = 10000
	DefaultH2MaxStreams = 1000
)

// Log is the durable room log a Relay commits messages to: roomlog.Redis or
// roomlog.Memory. Append must publish the committed entry on the Relay's Bus
// in roomlog's message format.
type Log interface {
	// Append commits data to room and returns its position.
	Append(ctx context.Context, room string, data []byte) (roomlog.Position, error)
	// Position returns room's epoch and last committed offset.
	Position(ctx context.Context, room string) (roomlog.Position, error)
	// Range returns room's position and its retained entries after offset
	// after, in order.
	Range(ctx context.Context, room string, after uint64) (roomlog.Position, []roomlog.Entry, error)
}

// logTimeout bounds each call to the room log.
const logTimeout = 5 * time.Second

// subscribeTimeout bounds how long the first member of a room waits for the
// room's bus subscription before it is served anyway.
const subscribeTimeout = 5 * time.Second

// Info is a snapshot of a Relay's counters, served as JSON on /info.
type Info struct {
	// Replica is Options.ID.
	Replica string `json:"replica"`
	// Connections is the number of joined WebSocket clients.
	Connections int `json:"connections"`
	// Rooms is the number of rooms with at least one local member.
	Rooms int `json:"rooms"`
	// Subscriptions is the number of bus subscriptions held (one per room).
	Subscriptions int `json:"subscriptions"`
	// SlowClosed counts members closed with 1013 because their send queue
	// was full.
	SlowClosed uint64 `json:"slow_closed"`
	// BusErrors counts unconfirmed subscriptions, undecodable bus
	// messages and the bus's own transport errors.
	BusErrors uint64 `json:"bus_errors"`
	// Repairs counts reads of the room log that filled a gap in the
	// offsets delivered (a missed or late publication, a resubscribe, a
	// full room queue, an epoch change).
	Repairs uint64 `json:"repairs"`
	// Rewinds counts rooms resynced because the room log's offsets went
	// back within its epoch (Redis lost the tail of the log on a failover
	// and reused offsets already delivered).
	Rewinds uint64 `json:"rewinds"`
	// Resubscribes counts bus channels re-subscribed after a reconnect.
	Resubscribes uint64 `json:"resubscribes"`
	// LogErrors counts failed room log calls.
	LogErrors uint64 `json:"log_errors"`
	// InvalidText counts text messages that were not valid UTF-8: sent by
	// a client (closed with 1007, never stored), or found in the room log
	// (stored by an older relay) and withheld from plain members.
	InvalidText uint64 `json:"invalid_text"`
	// BusDown is true while the bus cannot reach its server (Redis): every
	// member was closed with 1012 and joins are refused until it is back.
	BusDown bool `json:"bus_down"`
}

// Relay serves rooms of WebSocket clients. Create it with New; it is safe for
// concurrent use and must not be copied.
type Relay struct {
	opt    Options
	bus    bus.Bus
	origin origin
	log    *slog.Logger
	srv    *fasthttp.Server
	page   []byte
	up     websocket.FastHTTPUpgrader
	h2     *h2serve.Server     // the HTTP/2 side of every listener
	h2up   *websocket.Upgrader // upgrades over HTTP/2 streams
	ctx    context.Context
	cancel context.CancelFunc

	nextID      atomic.Uint64
	draining    atomic.Bool
	slowClosed  atomic.Uint64
	busErrors   atomic.Uint64
	repairs     atomic.Uint64
	rewinds     atomic.Uint64
	logErrors   atomic.Uint64
	invalidText atomic.Uint64
	busDown     atomic.Bool // set and cleared under mu
	subs        atomic.Int64
	roomLog     Log

	mu      sync.Mutex
	rooms   map[string]*room
	members map[uint64]*member
	drained chan struct{} // closed when members becomes empty during a drain
}

// New returns a Relay configured by o, with defaults for its zero fields.
func New(o Options) *Relay {
	if o.ID == "" {
		o.ID = DefaultID
	}
	if o.Bus == nil {
		o.Bus = bus.NewMemory().Endpoint()
	}
	if o.Log == nil {
		if ep, ok := o.Bus.(*bus.MemoryEndpoint); ok {
			o.Log = roomlog.Shared(ep.Bus(), roomlog.MemoryOptions{})
		} else {
			o.Log = roomlog.NewMemory(o.Bus, roomlog.MemoryOptions{})
		}
	}
	if o.MaxMembers <= 0 {
		o.MaxMembers = DefaultMaxMembers
	}
	if o.RoomPrefix == "" {
		o.RoomPrefix = DefaultRoomPrefix
	}
	if o.SendQueue <= 0 {
		o.SendQueue = DefaultSendQueue
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.DrainWindow <= 0 {
		o.DrainWindow = DefaultDrainWindow
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.H2MaxStreams <= 0 {
		o.H2MaxStreams = DefaultH2MaxStreams
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{
		opt:     o,
		bus:     o.Bus,
		roomLog: o.Log,
		log:     o.Logger.With("replica", o.ID),
		ctx:     ctx,
		cancel:  cancel,
		rooms:   make(map[string]*room),
		members: make(map[uint64]*member),
	}
	_, _ = rand.Read(r.origin[:]) // never fails on Linux
	r.page = bytes.ReplaceAll(demoPage, []byte(`"/room/demo?hello=1"`), []byte(strconv.Quote(o.RoomPrefix+"demo?hello=1")))
	r.up = websocket.FastHTTPUpgrader{
		Subprotocols:     []string{relayclient.Subprotocol},
		HandshakeTimeout: o.WriteTimeout,
		// The gateway in front owns the Origin policy; the relay accepts any.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		// Idle members hold no write buffer between writes.
		WriteBufferPool: &sync.Pool{},
	}
	r.h2up = &websocket.Upgrader{
		Subprotocols:     []string{relayclient.Subprotocol},
		HandshakeTimeout: o.WriteTimeout,
		CheckOrigin:      func(*http.Request) bool { return true }, // as r.up
		WriteBufferPool:  &sync.Pool{},
	}
	r.h2 = &h2serve.Server{
		Handler:              r.serveStream,
		MaxConcurrentStreams: uint32(min(o.H2MaxStreams, 1<<31-1)),
		WriteTimeout:         o.WriteTimeout,
	}
	r.srv = &fasthttp.Server{
		Handler:               r.handle,
		Name:                  "relay-backend",
		NoDefaultServerHeader: true,
		ReadTimeout:           o.WriteTimeout,
		WriteTimeout:          o.WriteTimeout,
		IdleTimeout:           time.Minute,
		Logger:                fastlog.Logger{Log: r.log},
		SecureErrorLogMessage: true, // no request bytes (tokens) in the log
		// Without it fasthttp's hijacked conn ignores Close, so a slow
		// consumer or a drain straggler could not be cut from another
		// goroutine. serveConn closes every connection it was handed.
		KeepHijackedConns: true,
	}
	if w, ok := o.Bus.(bus.StateWatcher); ok {
		go r.watchBus(w)
	}
	return r
}

// watchBus follows the bus's state until Close. When the bus loses its
// server, every member is closed with 1012 (service restart): nothing it
// sends can be committed and nothing reaches it, and a client reconnecting
// after a delay gets a replica whose bus works, or this one once it is back
// (relay.v1 clients resume with since, and get RESYNC if Redis lost the
// room). Until then /healthz answers 503 and joins are refused.
func (r *Relay) watchBus(w bus.StateWatcher) {
	for {
		up, changed := w.State()
		r.setBusDown(!up)
		select {
		case <-changed:
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *Relay) setBusDown(down bool) {
	r.mu.Lock()
	if r.busDown.Load() == down {
		r.mu.Unlock()
		return
	}
	r.busDown.Store(down)
	var list []*member
	if down {
		list = make([]*member, 0, len(r.members))
		for _, m := range r.members {
			list = append(list, m)
		}
	}
	r.mu.Unlock()
	if !down {
		r.log.Info("bus is back, accepting joins")
		return
	}
	r.log.Warn("bus is down, closing every client with 1012", "connections", len(list))
	for _, m := range list {
		m.kick(closeServiceRestart, "bus unavailable")
	}
}

// Serve accepts connections on ln until Close; it returns nil after Close.
// A connection that starts with the HTTP/2 client preface is served as
// cleartext HTTP/2 with extended CONNECT (see serveStream), any other as
// HTTP/1.1.
func (r *Relay) Serve(ln net.Listener) error {
	if err := r.srv.Serve(h2serve.NewListener(ln, r.h2, r.opt.WriteTimeout)); err != nil {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// Origin returns the random id this relay stamps on what it publishes, in hex.
func (r *Relay) Origin() string { return hex.EncodeToString(r.origin[:]) }

// Info returns a snapshot of the relay's counters.
func (r *Relay) Info() Info {
	r.mu.Lock()
	conns, rooms := len(r.members), len(r.rooms)
	r.mu.Unlock()
	errs := r.busErrors.Load()
	if ec, ok := r.bus.(bus.ErrorCounter); ok {
		errs += ec.Errors()
	}
	var resubs uint64
	if rc, ok := r.bus.(bus.ResubscribeCounter); ok {
		resubs = rc.Resubscribes()
	}
	return Info{
		Replica:       r.opt.ID,
		Connections:   conns,
		Rooms:         rooms,
		Subscriptions: int(r.subs.Load()),
		SlowClosed:    r.slowClosed.Load(),
		BusErrors:     errs,
		Repairs:       r.repairs.Load(),
		Rewinds:       r.rewinds.Load(),
		Resubscribes:  resubs,
		LogErrors:     r.logErrors.Load(),
		InvalidText:   r.invalidText.Load(),
		BusDown:       r.busDown.Load(),
	}
}

// Close stops the listeners, closes every client connection without a close
// handshake and waits, bounded by ctx, for plain HTTP connections to finish.
// Use Drain first for a graceful stop. The bus is the caller's to close.
func (r *Relay) Close(ctx context.Context) error {
	r.draining.Store(true)
	r.mu.Lock()
	for _, m := range r.members {
		m.cut()
	}
	r.mu.Unlock()
	r.cancel()
	err := r.srv.ShutdownWithContext(ctx)
	_ = r.h2.Close()
	if err != nil {
		return fmt.Errorf("shut down http server: %w", err)
	}
	return nil
}

func (r *Relay) countLogError(what, room string, err error) {
	n := r.logErrors.Add(1)
	if n&(n-1) == 0 { // bounded log volume, as for bus errors
		r.log.Warn("room log error", "op", what, "room", room, "err", err, "log_errors", n)
	}
}

func (r *Relay) countBusError(what string, err error) {
	n := r.busErrors.Add(1)
	if n&(n-1) == 0 { // the 1st, 2nd, 4th, 8th... error: bounded log volume
		r.log.Warn("bus error", "op", what, "err", err, "bus_errors", n)
	}
}
