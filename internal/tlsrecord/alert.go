package tlsrecord

import (
	"errors"
	"fmt"
)

// Alert is a TLS alert description (RFC 8446 section 6).
type Alert uint8

// The alerts this package sends or names.
const (
	AlertCloseNotify        Alert = 0
	AlertUnexpectedMessage  Alert = 10
	AlertBadRecordMAC       Alert = 20
	AlertRecordOverflow     Alert = 22
	AlertHandshakeFailure   Alert = 40
	AlertBadCertificate     Alert = 42
	AlertCertificateExpired Alert = 45
	AlertIllegalParameter   Alert = 47
	AlertDecodeError        Alert = 50
	AlertDecryptError       Alert = 51
	AlertProtocolVersion    Alert = 70
	AlertInternalError      Alert = 80
	AlertUserCanceled       Alert = 90
)

var alertNames = map[Alert]string{
	AlertCloseNotify:        "close_notify",
	AlertUnexpectedMessage:  "unexpected_message",
	AlertBadRecordMAC:       "bad_record_mac",
	AlertRecordOverflow:     "record_overflow",
	AlertHandshakeFailure:   "handshake_failure",
	AlertBadCertificate:     "bad_certificate",
	AlertCertificateExpired: "certificate_expired",
	AlertIllegalParameter:   "illegal_parameter",
	AlertDecodeError:        "decode_error",
	AlertDecryptError:       "decrypt_error",
	AlertProtocolVersion:    "protocol_version",
	AlertInternalError:      "internal_error",
	AlertUserCanceled:       "user_canceled",
}

// String is the alert's name in RFC 8446, or its number.
func (a Alert) String() string {
	if n, ok := alertNames[a]; ok {
		return n
	}
	return fmt.Sprintf("alert(%d)", uint8(a))
}

// AlertError is a failure of a connection that an alert names: one the
// peer sent (Remote), or one this end found, which it sends the peer
// (Session.AppendClose).
type AlertError struct {
	Alert  Alert
	Remote bool   // the peer sent it
	Reason string // what this end found; empty when Remote
}

func (e *AlertError) Error() string {
	if e.Remote {
		return "tlsrecord: peer sent alert " + e.Alert.String()
	}
	return "tlsrecord: " + e.Reason + " (" + e.Alert.String() + ")"
}

func fail(a Alert, reason string) error { return &AlertError{Alert: a, Reason: reason} }

// ErrSeqExhausted is what a Session returns when a direction's sequence
// number would wrap (2^64-1 records under one key, which a KeyUpdate
// would have prevented): the connection ends without using a nonce again.
var ErrSeqExhausted = errors.New("tlsrecord: sequence number exhausted")

// ErrClosed is what Seal returns after this end's close_notify or alert.
var ErrClosed = errors.New("tlsrecord: write after close")
