// Package tlsrecord runs the TLS 1.3 record layer (RFC 8446 section 5) of a
// server connection whose handshake crypto/tls did, so that the state of
// the connection after its handshake (the cipher suite, each direction's
// traffic secret and sequence number, an incomplete record read) is held
// here, where it can be driven by a poller without a goroutine and handed
// to another process (State), rather than inside a *tls.Conn, where it can
// be neither.
//
// Capture is the socket crypto/tls handshakes over: it learns the
// application traffic secrets through a per-connection KeyLogWriter, lets
// crypto/tls read no byte past the client's Finished, and accounts for the
// records crypto/tls wrote under the server's secret (its session
// ticket). Capture.Take then returns the connection's Session, or says why
// it stays with crypto/tls (TLS 1.2, a suite this package does not run).
//
// Session opens the records of a byte stream that arrives in any pieces
// (a non-blocking read's) and seals application data into records in the
// caller's buffer. It carries TLS_AES_128_GCM_SHA256,
// TLS_AES_256_GCM_SHA384 and TLS_CHACHA20_POLY1305_SHA256, KeyUpdate both
// ways, close_notify and alerts, and refuses what RFC 8446 says to refuse
// with the alert it names (AlertError).
package tlsrecord
