// Package h2core is the HTTP/2 connection core both roles use: the
// server (internal/h2serve, to browsers and in the relay) and the client
// (gateway/internal/upstream/h2, to the nodes). Each rule of the
// connection is written once here, so that a fix lands in both roles.
//
// Connection level: Queue, the frames queued for the network and their
// writer (a goroutine's, with a write deadline per 64 KiB, or a poller's,
// without blocking), with its bound on answers a peer does not read;
// ControlBudget, the frames a peer may send that do no work; ReadBudget,
// the bytes one ReadFrame may read (a CONTINUATION flood); PeerSettings,
// a peer's SETTINGS checked and applied in order; ConnError, the
// connection error that ends a connection with GOAWAY (Queue.GoAway),
// and ReadError, which sorts the Framer's read errors into stream errors
// and connection errors; ConnRecv, the connection's receive window, and
// ConnSend, its send window with the writers waiting for it (one woken
// per WINDOW_UPDATE, passing on what it leaves).
//
// Stream level: Stream, what both roles keep of a stream: its State
// (END_STREAM each way, ended, failed), its Recv (what was received and
// not read, the receive window and its credit, the content-length, the
// order of reads before an error) and its Send (its send window, relative
// to the peer's SETTINGS_INITIAL_WINDOW_SIZE so that a change of the
// setting visits no stream); ResetRecords, the streams the server reset
// lately, whose late frames it ignores.
//
// The package holds no connection: each role keeps its socket, its
// reader, its streams and its locks, and calls these types under the
// lock their documentation names.
package h2core
