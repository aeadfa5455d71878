package tunnel

import (
	"errors"
	"io"

	"github.com/wsgate/wsgate/internal/tlsrecord"
	"golang.org/x/sys/unix"
)

// The TLS record layer of a client on the event-driven engine (see
// RecordConn, recordClient). The poller reads the client's ciphertext
// into a buffer of its own, shared by all its TLS tunnels, when the socket
// is readable, and opens it (Session.Open) into another, which the framing
// reads as it reads a plain client's bytes; the bytes of a record that
// came in part wait in the Session (the record's so far, not a buffer's
// worth). What goes to the client is sealed (Session.Seal) into a third
// buffer of the poller's and written from there; what the socket does not
// take is the half's tail, as on a plain socket, in ciphertext. At the
// end the client gets close_notify, or the alert of the failure of its
// stream (AppendClose), if its socket takes it at once and no record went
// out in part. So the tunnel's framing, limits, keepalive, drain and
// close are those of a plain tunnel.

// pollerRecords are a poller's buffers for its TLS tunnels, made with the
// first of them.
type pollerRecords struct {
	cipher []byte // a read of a client's socket
	plain  []byte // what it opens to: a record read in part before may end in it
	sealed []byte // the records of one write to a client; grows to the largest
	one    [1][]byte
}

// records returns the poller's record buffers.
func (p *poller) records() *pollerRecords {
	if p.recs == nil {
		p.recs = &pollerRecords{
			cipher: make([]byte, bufSize),
			plain:  make([]byte, 0, bufSize+tlsrecord.MaxPlaintext+512),
		}
	}
	return p.recs
}

// errNoData is what read returns for a full read of records that carried
// no application data (a KeyUpdate, a record's first part): read on.
var errNoData = errors.New("tunnel: records without application data")

// read reads the client's socket once and returns the application data
// it completes, and whether the read filled the buffer (the short-read
// rule: a read that did not drained the socket). unix.EAGAIN when nothing
// is there, the end of the stream or the session's failure after the data
// before it.
func (r *recordClient) read(p *poller, fd int) ([]byte, bool, error) {
	if r.end != nil {
		return nil, false, r.end
	}
	b := p.records()
	n, err := rawRead(fd, b.cipher)
	if n <= 0 {
		if err == nil {
			err = io.EOF
		}
		return nil, false, err
	}
	full := n == len(b.cipher)
	plain, oerr := r.s.Open(b.plain[:0], b.cipher[:n])
	if oerr != nil {
		// The end (close_notify) or a failure: returned by the next
		// read, which no edge would trigger.
		r.end, full = oerr, true
	}
	switch {
	case len(plain) > 0:
		return plain, full, nil
	case oerr != nil:
		return nil, false, oerr
	case full:
		return nil, true, errNoData
	}
	return nil, false, unix.EAGAIN
}

// seal seals out, what forward queued for the client, into records in
// the poller's buffer, the gateway's keepalive ping (the bytes of out up
// to ping, 0: none) ending a record, so that its place in the socket is
// known. It returns the records as out's one segment, and where the ping's
// record starts and ends in them.
func (r *recordClient) seal(p *poller, out [][]byte, ping int) ([][]byte, int, int, error) {
	b := p.records()
	dst := b.sealed[:0]
	pingFrom, pingEnd := 0, 0
	pos := 0
	var err error
	for _, seg := range out {
		if len(seg) == 0 {
			continue
		}
		if ping > 0 && pos+len(seg) == ping && isPing(seg) {
			pingFrom = len(dst)
			dst, err = r.s.Seal(dst, seg)
			pingEnd = len(dst)
		} else {
			dst, err = r.s.Seal(dst, seg)
		}
		if err != nil {
			return nil, 0, 0, err
		}
		pos += len(seg)
	}
	b.sealed = dst[:0]
	b.one[0] = dst
	return b.one[:], pingFrom, pingEnd, nil
}

// closeRecords appends the client's last record to its socket, fd:
// close_notify, or the alert of the failure of its stream; once, without
// waiting, and not after a record went out in part.
func (r *recordClient) closeRecords(fd int) {
	if r.cut {
		return
	}
	var end error
	if r.end != nil && !errors.Is(r.end, io.EOF) {
		end = r.end
	}
	var a [64]byte
	if out := r.s.AppendClose(a[:0], end); len(out) > 0 {
		if n, _ := rawWrite(fd, out); n != len(out) {
			r.cut = true
		}
	}
}
