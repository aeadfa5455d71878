package tunnel

import "time"

// The package's clock: nanoseconds since monoBase, read from the monotonic
// clock, so a wall clock stepped back or forth (NTP, a resumed VM) neither
// fires a poller's timer early, holds one back, nor fills a rate bucket.

// monoBase is the origin of the package's clock.
var monoBase = time.Now()

// mono is t on the package's clock.
func mono(t time.Time) int64 { return int64(t.Sub(monoBase)) }

// monoTime is the time.Time of ns on the package's clock, with its
// monotonic reading.
func monoTime(ns int64) time.Time { return monoBase.Add(time.Duration(ns)) }
