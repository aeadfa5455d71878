// Package bus carries room messages between relay replicas.
//
// A Bus is a plain publish/subscribe transport keyed by room id: it moves
// opaque byte slices and knows nothing about WebSocket frames or replica
// identities. Two implementations ship: Memory, an in-process bus for a
// single process (tests, the gateway's demo, a lone replica), and Redis,
// built on Redis pub/sub for replicas in separate processes.
//
// Delivery is at most once on both: a message published while a subscription
// is being taken, or while Redis reconnects, may be lost. The Redis bus says
// when that may have happened: after it re-subscribes a channel it calls the
// channel's handlers with a nil message.
package bus

import (
	"context"
	"errors"
)

// Handler receives one message published on a room. It is called from the
// bus's own goroutine and must not block or call back into the bus. msg is
// shared with other handlers: treat it as read-only; it may be retained.
// A nil msg is not a message but a gap marker: the subscription was lost and
// taken again (a reconnect), so messages published meanwhile were missed. A
// published empty message arrives as a non-nil empty slice.
type Handler func(room string, msg []byte)

// Subscription is one registration of a Handler on a room.
type Subscription interface {
	// Close removes the registration. Once Close returns the handler is not
	// called again. Close is idempotent.
	Close() error
}

// Bus publishes messages on rooms and delivers them to every subscription on
// that room, including subscriptions of the publisher itself. Implementations
// are safe for concurrent use.
type Bus interface {
	// Publish sends msg to every subscriber of room.
	Publish(ctx context.Context, room string, msg []byte) error
	// Subscribe registers h for messages on room. It returns a non-nil
	// Subscription whenever h was registered; err is non-nil also when the
	// registration exists but could not be confirmed in time (the Redis bus
	// keeps retrying it), so a caller should count the error and keep the
	// Subscription.
	Subscribe(ctx context.Context, room string, h Handler) (Subscription, error)
}

// ErrorCounter is an optional ability of a Bus: the number of transport errors
// it met on its own goroutines (receive failures, reconnects), which no
// caller saw as a returned error.
type ErrorCounter interface {
	// Errors returns the count since the bus was created.
	Errors() uint64
}

// ResubscribeCounter is an optional ability of a Bus: the number of channel
// subscriptions it re-established after losing them, each of which was
// signalled to the channel's handlers with a nil message.
type ResubscribeCounter interface {
	// Resubscribes returns the count since the bus was created.
	Resubscribes() uint64
}

// StateWatcher is an optional ability of a Bus whose transport can be lost
// and regained (the Redis bus): whether it can reach its server now.
type StateWatcher interface {
	// State reports whether the transport is up, and returns a channel
	// that is closed at the next change of that answer.
	State() (up bool, changed <-chan struct{})
}

// ErrClosed is returned by Publish and Subscribe after the bus was closed.
var ErrClosed = errors.New("bus: closed")

// ErrUnconfirmed is returned by Subscribe when the subscription was
// registered but the server did not confirm it before the context or the
// confirm timeout ended; messages may be missed until it does.
var ErrUnconfirmed = errors.New("bus: subscription not confirmed")
