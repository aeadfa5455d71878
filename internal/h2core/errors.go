package h2core

import (
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
