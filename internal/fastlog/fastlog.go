// Package fastlog routes fasthttp's own messages (a request it could not
// parse, say) into a slog.Logger without the request's bytes, where
// credentials ride.
package fastlog

import (
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strconv"
)

// Logger is a fasthttp.Logger writing to an slog.Logger at debug level.
// Every quoted string in a message is hidden but the connection's
// addresses: fasthttp quotes the request's own bytes (a header value it
// could not parse, such as "Bearer <token>"), even with its
// SecureErrorLogMessage set. Set that too: it keeps the rest out.
type Logger struct{ Log *slog.Logger }

// quoted matches a Go-quoted string in a fasthttp message.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// Printf logs a fasthttp message with its request bytes hidden.
func (l Logger) Printf(format string, args ...any) {
	msg := quoted.ReplaceAllStringFunc(fmt.Sprintf(format, args...), func(q string) string {
		if s, err := strconv.Unquote(q); err == nil {
			if _, err := netip.ParseAddrPort(s); err == nil {
				return q
			}
		}
		return `"(request bytes hidden)"`
	})
	l.Log.Debug(msg)
}
