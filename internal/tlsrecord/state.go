package tlsrecord

import (
	"encoding/binary"
	"errors"
	"slices"
)

// State is what a Session is: enough to go on with the connection in
// another Session, in this process or the next (NewSession). Its secrets
// are the connection's keys: whoever holds a State can read and forge the
// connection's records, so it goes only where the socket goes. Make one
// Session of a State, once: two would seal different records under the
// same nonces.
type State struct {
	Suite        uint16 // the TLS 1.3 cipher suite (tls.TLS_AES_128_GCM_SHA256...)
	ReadSecret   []byte // the peer's current application traffic secret
	WriteSecret  []byte // this end's
	ReadSeq      uint64 // the sequence number of the peer's next record
	WriteSeq     uint64 // of this end's next record
	KeyUpdateDue bool   // the peer asked for a KeyUpdate this end has not sent
	Partial      []byte // the bytes of the peer's record read so far, if any
}

// ErrEnded is what Export returns for a session that has ended or
// failed, there being nothing to go on with, and what Open and Seal
// return after Export.
var ErrEnded = errors.New("tlsrecord: the session has ended")

// Export ends the session and returns its state, for the Session made of
// it (NewSession) to go on with the connection, in this process or
// another. From then on Open and Seal return ErrEnded, so that no two
// Sessions seal under one key and sequence number; a hand-over that fails
// takes the connection back with NewSession here. Export returns ErrEnded
// once the session has failed, read the peer's close_notify or sent its
// own.
func (s *Session) Export() (State, error) {
	if s.err != nil || s.eof || s.closed {
		return State{}, ErrEnded
	}
	st := State{
		Suite:        s.suite.id,
		ReadSecret:   slices.Clone(s.in.secret),
		WriteSecret:  slices.Clone(s.out.secret),
		ReadSeq:      s.in.seq,
		WriteSeq:     s.out.seq,
		KeyUpdateDue: s.keyUpdateDue,
		Partial:      slices.Clone(s.part),
	}
	s.err, s.part = ErrEnded, nil
	return st, nil
}

// stateVersion is the first byte of an encoded State.
const stateVersion = 1

// MarshalBinary encodes the state: a version byte, the suite, the
// sequence numbers, the KeyUpdate flag, then the secrets and the partial
// record, each after its 16-bit length.
func (st State) MarshalBinary() ([]byte, error) {
	if len(st.ReadSecret) > 0xffff || len(st.WriteSecret) > 0xffff || len(st.Partial) > 0xffff {
		return nil, errors.New("tlsrecord: state too large to encode")
	}
	b := make([]byte, 0, 1+2+8+8+1+3*2+len(st.ReadSecret)+len(st.WriteSecret)+len(st.Partial))
	b = append(b, stateVersion)
	b = binary.BigEndian.AppendUint16(b, st.Suite)
	b = binary.BigEndian.AppendUint64(b, st.ReadSeq)
	b = binary.BigEndian.AppendUint64(b, st.WriteSeq)
	flag := byte(0)
	if st.KeyUpdateDue {
		flag = 1
	}
	b = append(b, flag)
	for _, f := range [][]byte{st.ReadSecret, st.WriteSecret, st.Partial} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b, nil
}

var errBadState = errors.New("tlsrecord: malformed state")

// UnmarshalBinary decodes what MarshalBinary encoded. It checks the
// encoding only; NewSession checks what the state says.
func (st *State) UnmarshalBinary(b []byte) error {
	if len(b) < 1+2+8+8+1 || b[0] != stateVersion || b[19] > 1 {
		return errBadState
	}
	out := State{
		Suite:        binary.BigEndian.Uint16(b[1:]),
		ReadSeq:      binary.BigEndian.Uint64(b[3:]),
		WriteSeq:     binary.BigEndian.Uint64(b[11:]),
		KeyUpdateDue: b[19] == 1,
	}
	b = b[20:]
	for _, f := range []*[]byte{&out.ReadSecret, &out.WriteSecret, &out.Partial} {
		if len(b) < 2 {
			return errBadState
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return errBadState
		}
		if n > 0 {
			*f = slices.Clone(b[2 : 2+n])
		}
		b = b[2+n:]
	}
	if len(b) != 0 {
		return errBadState
	}
	*st = out
	return nil
}
