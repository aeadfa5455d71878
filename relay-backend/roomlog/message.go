package roomlog

import (
	"crypto/rand"
	"fmt"
	"strconv"
)

// A published message is the text "<offset> <epoch> " followed by the
// entry's data, byte for byte. The Redis script composes it with string
// concatenation, which is binary-safe.

// FormatMessage appends the published form of e to dst.
func FormatMessage(dst []byte, e Entry) []byte {
	dst = strconv.AppendUint(dst, e.Offset, 10)
	dst = append(dst, ' ')
	dst = append(dst, e.Epoch...)
	dst = append(dst, ' ')
	return append(dst, e.Data...)
}

// ParseMessage decodes a published message. The entry's Data aliases b.
func ParseMessage(b []byte) (Entry, error) {
	i := 0
	for i < len(b) && i < 21 && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(b) || b[i] != ' ' || (b[0] == '0' && i > 1) {
		return Entry{}, fmt.Errorf("%w: bad offset", ErrBadMessage)
	}
	off, err := strconv.ParseUint(string(b[:i]), 10, 64)
	if err != nil || off == 0 {
		return Entry{}, fmt.Errorf("%w: offset %q", ErrBadMessage, b[:i])
	}
	rest := b[i+1:]
	j := 0
	for j < len(rest) && j <= 64 && validEpochByte(rest[j]) {
		j++
	}
	if j == 0 || j > 64 || j >= len(rest) || rest[j] != ' ' {
		return Entry{}, fmt.Errorf("%w: bad epoch", ErrBadMessage)
	}
	return Entry{Epoch: string(rest[:j]), Offset: off, Data: rest[j+1:]}, nil
}

func validEpochByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

const epochAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// NewEpoch returns a random epoch of EpochLen characters from [A-Za-z0-9].
func NewEpoch() string {
	var b [EpochLen]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	for i := range b {
		b[i] = epochAlphabet[int(b[i])%len(epochAlphabet)]
	}
	return string(b[:])
}
