package h2serve

import (
	"errors"

	"golang.org/x/net/http2"
)

// CutForFlood reports whether err, as ServeConn or ServeNegotiated
// returned it, ended a connection this side cut for flooding, with
// GOAWAY(ENHANCE_YOUR_CALM): control frames far beyond the work they come
// with, streams reset before their answer (rapid reset) among them, their
// answers not read, or a header block far over its bound. The user may
// then refuse the client for a while (see internal/penalty), so that a
// client that reconnects at once does not make the server pay a new
// handshake and a new flood each time.
func CutForFlood(err error) bool {
	var ce connError
	return errors.As(err, &ce) && ce.Code == http2.ErrCodeEnhanceYourCalm
}

// spendEarlyResetLocked charges the client's RST_STREAM of a stream this
// side had not begun to answer: the token its HEADERS earned is taken
// back (the RST_STREAM's own was spent as for any frame that does no
// work), so that a stream opened and reset at once (CVE-2023-44487,
// "rapid reset") costs the control budget one token, which time refills
// at controlRefill a second: a client that resets more than that, beyond
// the burst, is cut (ENHANCE_YOUR_CALM), as Go's net/http server cuts
// one whose early resets pile up ("too_many_early_resets") and Envoy
// one whose streams are mostly reset early. A client that cancels a few
// requests a second never comes near. Called with c.mu held.
func (c *conn) spendEarlyResetLocked(s *Stream) error {
	if s.headSent {
		return nil
	}
	return c.spendLocked()
}
