// Package roomlog is the durable, ordered log of each room's messages.
//
// Per room the log holds an epoch, a random string created with the room's
// first use, and a monotonically increasing offset: the n-th message
// appended to a room in an epoch gets offset n, so offsets are dense. The
// newest History messages are retained for replay; a room idle for longer
// than its TTL is forgotten, and its next use starts a new epoch at offset 0.
//
// Every Append also publishes the committed message, with its epoch and
// offset, on the room's bus channel (see FormatMessage and ParseMessage), in
// the same atomic step. Subscribers that miss a publication (a reconnect, a
// full queue) notice the gap in offsets and repair it with Range.
//
// Two implementations ship: Redis (one Lua script per message: offset bump,
// XADD into the room's Stream with the offset as entry id, MAXLEN ~, idle
// expiry and PUBLISH, or SPUBLISH on a Redis Cluster, where every key and
// channel of a room is hash-tagged "{room}" into one slot) and Memory (the same semantics in one process,
// publishing on a bus.Memory).
package roomlog

import (
	"errors"
	"time"
)

// Entry is one committed message of a room.
type Entry struct {
	// Epoch is the room's epoch the entry was committed in.
	Epoch string
	// Offset is the entry's position in the epoch, from 1.
	Offset uint64
	// Data is the message, opaque to the log. It is shared: treat it as
	// read-only.
	Data []byte
}

// Position is a room's epoch and the offset of its last committed message
// (0 when none was committed in this epoch).
type Position struct {
	// Epoch is the room's current epoch.
	Epoch string
	// Offset is the last committed offset.
	Offset uint64
}

// Defaults applied to zero option fields.
const (
	// DefaultHistory is how many messages a room retains.
	DefaultHistory = 1000
	// DefaultTTL is how long an idle room is kept.
	DefaultTTL = 24 * time.Hour
	// DefaultKeyPrefix is put before a room's Redis keys.
	DefaultKeyPrefix = "wsgate:"
	// DefaultChannelPrefix is put before a room id to name its pub/sub
	// channel; it matches bus.RedisOptions' default.
	DefaultChannelPrefix = "wsgate:room:"
	// EpochLen is the length of the epochs this package creates.
	EpochLen = 16
)

// ErrClosed is returned by the logs' methods after Close.
var ErrClosed = errors.New("roomlog: closed")

// ErrBadMessage is returned by ParseMessage for a payload that is not a
// published entry.
var ErrBadMessage = errors.New("roomlog: malformed published message")
