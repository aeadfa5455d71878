package h2core

import (
	"errors"
	"fmt"

	"golang.org/x/net/http2"
)

// ConnError is a connection error this side found (RFC 9113 section
// 5.4.1): the connection ends with GOAWAY carrying Code. Both roles
// return it from their readers and match it with errors.As.
type ConnError struct {
	// Code is the GOAWAY's error code.
	Code http2.ErrCode
	// Reason says what the peer did; it goes in the GOAWAY's debug data.
	Reason string
}

// Error says the code and the reason.
func (e ConnError) Error() string {
	return fmt.Sprintf("http2: connection error %v: %s", e.Code, e.Reason)
}

// ReadError sorts an error of Framer.ReadFrame. A stream error (RFC 9113
// section 5.4.2) is returned as se with stream true: the role answers it
// with RST_STREAM, on a stream it may, and reads on. Anything else ends
// the connection, and end is why: a ConnError for a malformed frame (with
// the Framer's detail), a frame past SETTINGS_MAX_FRAME_SIZE or a header
// block past its ReadBudget, else err itself (the socket's).
func ReadError(fr *http2.Framer, err error) (se http2.StreamError, stream bool, end error) {
	if errors.As(err, &se) {
		return se, true, nil
	}
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		reason := "malformed frame"
		if d := fr.ErrorDetail(); d != nil {
			reason = d.Error()
		}
		return se, false, ConnError{http2.ErrCode(ce), reason}
	case errors.Is(err, http2.ErrFrameTooLarge):
		return se, false, ConnError{http2.ErrCodeFrameSize, "frame larger than SETTINGS_MAX_FRAME_SIZE"}
	case errors.Is(err, ErrHeaderFlood):
		return se, false, ConnError{http2.ErrCodeEnhanceYourCalm, "a header block far over SETTINGS_MAX_HEADER_LIST_SIZE"}
	}
	return se, false, err
}
