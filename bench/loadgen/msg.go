package loadgen

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"time"
)

// MsgHeaderLen is the size of a load message's fixed header; a message of
// -size B carries B-MsgHeaderLen bytes of padding (B is raised to at least
// MsgHeaderLen).
const MsgHeaderLen = 32

// msgMagic marks a wsload message ("WL" and layout version 1).
const msgMagic uint32 = 0x574C0001

// ErrNotLoadMsg is returned by ParseMsg for a payload that is not a wsload
// message (too short or without the magic). Receivers count nothing for it:
// other clients may share the room.
var ErrNotLoadMsg = errors.New("loadgen: not a wsload message")

// Msg is the fixed header of every message wsload sends, big-endian:
//
//	bytes  0-3   magic 0x574C0001 ("WL", layout version 1)
//	bytes  4-7   run id: random per run, so history from other runs is ignored
//	bytes  8-11  sender id: unique within the run (process index in the high bits)
//	bytes 12-15  flags (bit 0: resent after a reconnect)
//	bytes 16-23  sequence number of the sender's message, from 0
//	bytes 24-31  send time, Unix nanoseconds of the sending process's clock
//	bytes 32-    padding up to the requested size
//
// It is a plain value.
type Msg struct {
	Run    uint32
	Sender uint32
	Flags  uint32
	Seq    uint64
	SentNS int64
}

// FlagResent marks a message sent again after a reconnect because its ACK
// never arrived.
const FlagResent uint32 = 1

// AppendMsg appends m padded to size bytes (at least MsgHeaderLen) to dst.
func AppendMsg(dst []byte, m Msg, size int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, msgMagic)
	dst = binary.BigEndian.AppendUint32(dst, m.Run)
	dst = binary.BigEndian.AppendUint32(dst, m.Sender)
	dst = binary.BigEndian.AppendUint32(dst, m.Flags)
	dst = binary.BigEndian.AppendUint64(dst, m.Seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.SentNS))
	for i := MsgHeaderLen; i < size; i++ {
		dst = append(dst, byte(i))
	}
	return dst
}

// ParseMsg decodes the header of a wsload message; the padding is ignored.
func ParseMsg(p []byte) (Msg, error) {
	if len(p) < MsgHeaderLen || binary.BigEndian.Uint32(p) != msgMagic {
		return Msg{}, ErrNotLoadMsg
	}
	return Msg{
		Run:    binary.BigEndian.Uint32(p[4:]),
		Sender: binary.BigEndian.Uint32(p[8:]),
		Flags:  binary.BigEndian.Uint32(p[12:]),
		Seq:    binary.BigEndian.Uint64(p[16:]),
		SentNS: int64(binary.BigEndian.Uint64(p[24:])),
	}, nil
}

// Age returns how long ago m was sent by this process's clock.
func (m Msg) Age(now time.Time) time.Duration { return time.Duration(now.UnixNano() - m.SentNS) }

// newRunID returns a random run id: messages of other runs (history a
// relay replays, leftovers in a shared room) never match it.
func newRunID() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}
