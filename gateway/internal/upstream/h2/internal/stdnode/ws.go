package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
)

// serveWebSocket is a WebSocket echo over one extended CONNECT stream
// (RFC 6455 framing, no extensions): each frame from the client, which
// must be masked, goes back unmasked with the same opcode and FIN bit, a
// ping as a pong, and a close as the same close, after which it returns.
// Each frame is flushed on its own.
func serveWebSocket(body io.Reader, w io.Writer, rc *http.ResponseController) {
	br := bufio.NewReader(body)
	for {
		fin, op, payload, err := readFrame(br)
		if err != nil {
			return
		}
		switch op {
		case 0xA: // a pong needs no answer
			continue
		case 0x9: // a ping gets its pong
			op = 0xA
		}
		if _, err := w.Write(frame(fin, op, payload)); err != nil || rc.Flush() != nil {
			return
		}
		if op == 0x8 {
			return
		}
	}
}

// readFrame reads one masked client frame.
func readFrame(br *bufio.Reader) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(br, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	if h[1]&0x80 == 0 {
		return false, 0, nil, errors.New("unmasked client frame")
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(br, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(br, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 16<<20 {
		return false, 0, nil, errors.New("frame too large")
	}
	var mask [4]byte
	if _, err = io.ReadFull(br, mask[:]); err != nil {
		return
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(br, payload); err != nil {
		return
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return fin, op, payload, nil
}

// frame renders a server frame (unmasked).
func frame(fin bool, op byte, payload []byte) []byte {
	b := []byte{op, 0}
	if fin {
		b[0] |= 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b[1] = byte(n)
	case n < 1<<16:
		b[1] = 126
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b[1] = 127
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, payload...)
}
