package wsframe

// Scanner follows frame boundaries in ONE direction of a WebSocket byte
// stream, without copying or unmasking payloads. The zero value is ready to
// use; set the exported fields before the first Advance.
//
// A Scanner is 56 bytes on 64-bit platforms (the gateway holds two per
// tunnel); the only bytes it keeps are a partial header (at most 14) and the
// 2-byte status code of a close frame. It is not safe for concurrent use:
// each direction of a tunnel is read by one goroutine, which owns its
// Scanner. Copying a Scanner copies its state.
//
// Errors are sticky: once Advance returns an error, every later call returns
// the same error and consumes nothing. Frame headers are validated only when
// complete, so where an error is reported does not depend on how the stream
// was chunked.
type Scanner struct {
	// MaxPayload is the largest payload a single frame may declare, in
	// bytes (default 0 = unlimited). A longer frame fails with ErrTooLarge
	// as soon as its header is complete.
	MaxPayload uint64
	// RequireMasked makes an unmasked frame fail with ErrUnmasked; set it
	// for the client-to-server direction (default false).
	RequireMasked bool
	// RejectMasked makes a masked frame fail with ErrMasked; set it for the
	// server-to-client direction (default false).
	RejectMasked bool

	hn        uint8  // bytes of a partial header held in hdr
	inFrame   bool   // a header is complete and its payload not yet consumed
	inMessage bool   // a fragmented data message has started and not ended
	errIdx    uint8  // index into scanErrs of the sticky error, 0 = none
	closeN    uint8  // close payload bytes folded into closeCode (0-2)
	closeCode uint16 // status code of the close frame being read or just ended
	hdr       [MaxHeaderLen]byte
	remaining uint64 // payload bytes of the current frame still to consume
	h         Header
}

// Advance consumes bytes of p from its start up to the end of the current
// frame or the end of p, whichever comes first, and returns how many it
// consumed. end is true when p[:n] finished a frame (header and payload); a
// zero-length frame ends with n equal to (the rest of) its header. n > 0
// whenever len(p) > 0 and err == nil. A header may straddle calls: its first
// bytes are consumed and kept until the rest arrives. On error, n counts the
// bytes consumed up to the end of the offending header, which is then
// available from Header. It does not allocate.
func (s *Scanner) Advance(p []byte) (n int, end bool, err error) {
	if s.errIdx != 0 {
		return 0, false, scanErrs[s.errIdx]
	}
	if len(p) == 0 {
		return 0, false, nil
	}
	if !s.inFrame {
		var idx uint8
		n, idx = s.readHeader(p)
		if idx != 0 {
			s.errIdx = idx
			return n, false, scanErrs[idx]
		}
		if !s.inFrame {
			return n, false, nil // header still partial, all of p kept
		}
	}
	k := uint64(len(p) - n)
	if k > s.remaining {
		k = s.remaining
	}
	if s.h.Op == OpClose && s.closeN < 2 {
		s.foldCloseCode(p[n : n+int(k)])
	}
	n += int(k)
	s.remaining -= k
	if s.remaining > 0 {
		return n, false, nil
	}
	s.endFrame()
	return n, true, nil
}

// readHeader consumes header bytes from p. It returns how many it consumed
// and, when the header is complete and invalid, the error index. On a valid
// complete header it starts the frame (s.inFrame = true).
func (s *Scanner) readHeader(p []byte) (n int, idx uint8) {
	var hp []byte // the complete header, wherever it lives
	if s.hn == 0 && len(p) >= 2 && len(p) >= headerLen(p[1]) {
		// Fast path: the whole header is in p; parse it in place.
		n = headerLen(p[1])
		hp = p[:n]
	} else {
		// Slow path: gather the header in s.hdr. At most two copies: up
		// to the length byte, then up to the header's full length.
		if s.hn < 2 {
			c := copy(s.hdr[s.hn:2], p)
			s.hn += uint8(c)
			n += c
			if s.hn < 2 {
				return n, 0
			}
		}
		hl := headerLen(s.hdr[1])
		c := copy(s.hdr[s.hn:hl], p[n:])
		s.hn += uint8(c)
		n += c
		if int(s.hn) < hl {
			return n, 0
		}
		s.hn = 0
		hp = s.hdr[:hl]
	}
	s.closeCode, s.closeN = 0, 0
	if _, err := parseHeader(hp, &s.h); err != nil {
		return n, errIndex(err)
	}
	if idx := s.check(); idx != 0 {
		return n, idx
	}
	if s.h.Op == OpText || s.h.Op == OpBinary {
		s.inMessage = !s.h.Fin
	}
	s.inFrame = true
	s.remaining = s.h.Length
	return n, 0
}

// check applies the Scanner's direction, size and fragmentation rules to the
// syntactically valid header s.h and returns an error index or 0.
func (s *Scanner) check() uint8 {
	h := &s.h
	switch {
	case h.Op == OpClose && h.Length == 1:
		return errIndex(ErrBadClosePayload)
	case s.RequireMasked && !h.Masked:
		return errIndex(ErrUnmasked)
	case s.RejectMasked && h.Masked:
		return errIndex(ErrMasked)
	case h.Op == OpContinuation && !s.inMessage:
		return errIndex(ErrUnexpectedContinuation)
	case (h.Op == OpText || h.Op == OpBinary) && s.inMessage:
		return errIndex(ErrExpectedContinuation)
	case s.MaxPayload != 0 && h.Length > s.MaxPayload:
		return errIndex(ErrTooLarge)
	}
	return 0
}

// foldCloseCode folds the first payload bytes of a close frame, unmasked,
// into s.closeCode until it holds both bytes of the status code.
func (s *Scanner) foldCloseCode(p []byte) {
	for i := 0; i < len(p) && s.closeN < 2; i++ {
		b := p[i]
		if s.h.Masked {
			b ^= s.h.Mask[s.closeN]
		}
		s.closeCode = s.closeCode<<8 | uint16(b)
		s.closeN++
	}
}

// endFrame updates the message state after the last payload byte of s.h.
func (s *Scanner) endFrame() {
	s.inFrame = false
	switch s.h.Op {
	case OpContinuation:
		s.inMessage = !s.h.Fin
	case OpClose:
		if s.h.Length == 0 {
			s.closeCode = CloseNoStatus
		}
	}
}

// Header returns the header of the frame in progress, or of the frame that
// just ended (or failed validation). While a new header is only partly read,
// it still returns the previous one.
func (s *Scanner) Header() Header { return s.h }

// AtBoundary reports whether no frame (nor part of a header) is in progress,
// so a whole frame may be inserted into the stream at this point. Control
// frames may be inserted even while InMessage reports true.
func (s *Scanner) AtBoundary() bool { return !s.inFrame && s.hn == 0 }

// InMessage reports whether a fragmented data message has started (its first
// frame, with FIN=0, was read) and its final continuation frame has not yet
// ended. A single unfragmented frame never sets it.
func (s *Scanner) InMessage() bool { return s.inMessage }

// CloseCode returns, after a close frame ended, its status code unmasked
// (1005, CloseNoStatus, if it had no payload), until the next header is
// complete; 0 otherwise. The code is reported as sent: check it with
// ValidCloseCode.
func (s *Scanner) CloseCode() uint16 {
	if s.inFrame || s.h.Op != OpClose || s.errIdx != 0 {
		return 0
	}
	return s.closeCode
}

// PartialHeader returns how many bytes of a header that is not yet complete
// the Scanner holds (0 to MaxHeaderLen-1). They were the last bytes passed to
// Advance; a proxy that holds them back until the header is complete can
// insert a whole frame into the stream at any moment no payload is in flight.
func (s *Scanner) PartialHeader() int { return int(s.hn) }
