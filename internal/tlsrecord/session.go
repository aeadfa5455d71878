package tlsrecord

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
)

// Record sizes and types (RFC 8446 section 5).
const (
	headerLen = 5
	// MaxPlaintext is the most application data one record carries.
	MaxPlaintext = 1 << 14
	// maxCiphertext is the largest encrypted record body a peer may send.
	maxCiphertext = MaxPlaintext + 256

	typeAlert     = 21
	typeHandshake = 22
	typeAppData   = 23

	msgNewSessionTicket = 4
	msgKeyUpdate        = 24
)

// exhausted is the sequence number no record may use: one more record
// would wrap the 64-bit number and reuse a nonce.
const exhausted = math.MaxUint64

// rekeyAfter is how many records this end seals under one key before it
// sends a KeyUpdate of its own: AES-GCM's limit is about 2^24.5 full-size
// records per key (RFC 8446 section 5.5). A var for the tests.
var rekeyAfter uint64 = 1 << 24

// Session is the record layer of one TLS 1.3 connection after its
// handshake: both directions' keys and sequence numbers, and the bytes of
// a record read in part. It reads the peer's records (Open) and seals this
// end's (Seal); it does no I/O. Between records it holds no buffer; within
// one, the bytes that came. It is not safe for concurrent use: one poller
// (or one caller under a lock) drives it.
type Session struct {
	suite *suite
	in    keys // the peer's records
	out   keys // this end's

	part []byte // an incomplete record: header, then as much body as came

	keyUpdateDue bool  // the peer asked for a KeyUpdate, sent before the next data
	eof          bool  // the peer sent close_notify
	err          error // the first failure; every later Open and Seal returns it
	closed       bool  // this end sent close_notify or an alert
}

// NewSession returns the session st describes (see Capture.Take and
// Session.Export).
func NewSession(st State) (*Session, error) {
	s := &Session{suite: suiteByID(st.Suite)}
	if s.suite == nil {
		return nil, errors.New("tlsrecord: state names a cipher suite this package does not run")
	}
	size := s.suite.hash().Size()
	if len(st.ReadSecret) != size || len(st.WriteSecret) != size {
		return nil, errors.New("tlsrecord: state's secrets are not of the suite's hash size")
	}
	if len(st.Partial) >= headerLen {
		n, err := recordLen(st.Partial)
		if err != nil {
			return nil, err
		}
		if len(st.Partial) >= headerLen+n {
			return nil, errors.New("tlsrecord: state's partial record is whole")
		}
	}
	if err := s.in.set(s.suite, slices.Clone(st.ReadSecret), st.ReadSeq); err != nil {
		return nil, err
	}
	if err := s.out.set(s.suite, slices.Clone(st.WriteSecret), st.WriteSeq); err != nil {
		return nil, err
	}
	if len(st.Partial) > 0 {
		s.part = slices.Clone(st.Partial)
	}
	s.keyUpdateDue = st.KeyUpdateDue
	return s, nil
}

// Release drops the AEAD states of both directions (an AES-GCM state,
// its key schedules and GHASH table, is 768 bytes), keeping their keys:
// the next Open or Seal makes the one it needs again. A poller releases
// the session of a connection with nothing to read or write, so that an
// idle connection holds its keys and sequence numbers only, at the cost of
// making a state again (a key schedule) when records come or go.
func (s *Session) Release() { s.in.aead, s.out.aead = nil, nil }

// recordLen checks the header at the start of b and returns the length
// of the record's body. Only application_data may come after the
// handshake (a change_cipher_spec is allowed only before the peer's
// Finished), and no body is over 2^14+256 bytes.
func recordLen(b []byte) (int, error) {
	if b[0] != typeAppData {
		return 0, fail(AlertUnexpectedMessage, "record of type "+itoa(int(b[0]))+" after the handshake")
	}
	n := int(binary.BigEndian.Uint16(b[3:5]))
	if n > maxCiphertext {
		return 0, fail(AlertRecordOverflow, "record of "+itoa(n)+" bytes")
	}
	return n, nil
}

// Buffered is the number of bytes of an incomplete record the session
// holds (0 between records).
func (s *Session) Buffered() int { return len(s.part) }

// Open reads src, the next bytes of the peer's stream, and appends the
// application data of the records it completes to dst, which must not
// overlap src (with len(src)+Buffered() bytes of spare capacity, dst
// does not grow: a record's content type and padding land there before
// they are cut). A record that src ends in the middle of is kept (its bytes
// so far) and finished by the next call. After the peer's close_notify it
// returns the data before it and io.EOF, and ignores what follows. A
// record that fails ends the session: Open returns an *AlertError naming
// the alert to send (AppendClose sends it), ErrSeqExhausted, or the
// peer's alert as an *AlertError with Remote set, and returns it again on
// every later call.
func (s *Session) Open(dst, src []byte) ([]byte, error) {
	for len(src) > 0 && s.err == nil && !s.eof {
		var rec []byte
		if len(s.part) == 0 && len(src) >= headerLen {
			n, err := recordLen(src)
			if err != nil {
				s.err = err
				break
			}
			if len(src) >= headerLen+n {
				rec, src = src[:headerLen+n], src[headerLen+n:]
			}
		}
		if rec == nil {
			var err error
			if src, err = s.fill(src); err != nil {
				s.err = err
				break
			}
			if rec = s.whole(); rec == nil {
				break // src is used up
			}
			s.part = nil
		}
		dst = s.openRecord(dst, rec)
	}
	switch {
	case s.err != nil:
		return dst, s.err
	case s.eof:
		return dst, io.EOF
	}
	return dst, nil
}

// fill moves bytes of src to the partial record, up to its end, and
// returns the rest of src. The record's buffer grows as its bytes come,
// so that a peer that sends a header and stops holds a few bytes here,
// not a record's worth.
func (s *Session) fill(src []byte) ([]byte, error) {
	if len(s.part) < headerLen {
		k := min(headerLen-len(s.part), len(src))
		s.part = append(s.part, src[:k]...)
		src = src[k:]
		if len(s.part) < headerLen {
			return src, nil
		}
		if _, err := recordLen(s.part); err != nil {
			return src, err
		}
	}
	n := int(binary.BigEndian.Uint16(s.part[3:5]))
	k := min(headerLen+n-len(s.part), len(src))
	s.part = append(s.part, src[:k]...)
	return src[k:], nil
}

// whole is the partial record if it is whole, else nil.
func (s *Session) whole() []byte {
	if len(s.part) < headerLen || len(s.part) < headerLen+int(binary.BigEndian.Uint16(s.part[3:5])) {
		return nil
	}
	return s.part
}

// openRecord decrypts rec, a whole record whose header recordLen passed,
// appends its application data to dst and acts on anything else in it.
func (s *Session) openRecord(dst, rec []byte) []byte {
	if s.in.seq == exhausted {
		s.err = ErrSeqExhausted
		return dst
	}
	start := len(dst)
	aead, err := s.in.cipher()
	if err != nil {
		s.err = err
		return dst
	}
	out, err := aead.Open(dst, s.in.next(), rec[headerLen:], rec[:headerLen])
	if err != nil {
		s.err = fail(AlertBadRecordMAC, "record failed to authenticate")
		return dst
	}
	dst = out
	s.in.seq++
	// The inner plaintext: content, its type, zero padding (section 5.4),
	// 2^14+1 bytes at most.
	if len(dst)-start > MaxPlaintext+1 {
		s.err = fail(AlertRecordOverflow, "record of "+itoa(len(dst)-start)+" bytes of plaintext")
		return dst[:start]
	}
	i := len(dst) - 1
	for i >= start && dst[i] == 0 {
		i--
	}
	if i < start {
		s.err = fail(AlertUnexpectedMessage, "record with no content type")
		return dst[:start]
	}
	typ, content := dst[i], dst[start:i]
	switch typ {
	case typeAppData:
		return dst[:i]
	case typeAlert:
		s.readAlert(content)
	case typeHandshake:
		s.readHandshake(content)
	default:
		s.err = fail(AlertUnexpectedMessage, "record of inner type "+itoa(int(typ)))
	}
	return dst[:start]
}

// readAlert acts on the peer's alert: close_notify is the end of its
// stream; in TLS 1.3 every other alert ends the connection (section 6).
func (s *Session) readAlert(b []byte) {
	switch {
	case len(b) != 2:
		s.err = fail(AlertDecodeError, "alert record of "+itoa(len(b))+" bytes")
	case Alert(b[1]) == AlertCloseNotify:
		s.eof = true
	default:
		s.err = &AlertError{Alert: Alert(b[1]), Remote: true}
	}
}

// readHandshake acts on a handshake record from the peer. After the
// handshake a client may send KeyUpdate only (section 4.6: a
// NewSessionTicket comes from servers, and this end asks for no
// certificate). A KeyUpdate changes keys, so it ends its record (section
// 5.1); this end also takes it whole in one record, as every TLS stack
// sends it.
func (s *Session) readHandshake(b []byte) {
	if len(b) < 4 {
		s.err = fail(AlertDecodeError, "handshake message split across records")
		return
	}
	typ, n := b[0], int(b[1])<<16|int(b[2])<<8|int(b[3])
	switch {
	case typ != msgKeyUpdate:
		s.err = fail(AlertUnexpectedMessage, "handshake message of type "+itoa(int(typ))+" after the handshake")
	case n != 1 || len(b) < 5:
		s.err = fail(AlertDecodeError, "KeyUpdate of "+itoa(n)+" bytes")
	case len(b) > 5:
		s.err = fail(AlertUnexpectedMessage, "data after a KeyUpdate in its record")
	case b[4] > 1:
		s.err = fail(AlertIllegalParameter, "KeyUpdate request_update "+itoa(int(b[4])))
	default:
		if err := s.in.set(s.suite, s.suite.nextSecret(s.in.secret), 0); err != nil {
			s.err = err
			return
		}
		// Several requests while this end is silent get one answer.
		s.keyUpdateDue = s.keyUpdateDue || b[4] == 1
	}
}

// SealedLen is the most Seal appends for n bytes of application data:
// its records and a KeyUpdate before them.
func SealedLen(n int) int {
	const overhead = headerLen + 1 + 16 // header, content type, tag
	records := max(1, (n+MaxPlaintext-1)/MaxPlaintext)
	return n + records*overhead + (overhead + 5)
}

// Seal appends p to dst as application data records of at most 2^14
// bytes, which must not overlap p (SealedLen(len(p)) bytes of spare
// capacity in dst spare it from growing); an empty p makes one empty
// record, which the peer reads as nothing. A KeyUpdate goes before them
// when the peer asked for one or this end's key has sealed 2^24
// records. It returns ErrClosed after AppendClose, the session's failure
// after one, and ErrSeqExhausted (appending nothing) rather than use a
// nonce again.
func (s *Session) Seal(dst, p []byte) ([]byte, error) {
	if s.err != nil {
		return dst, s.err
	}
	if s.closed {
		return dst, ErrClosed
	}
	for first := true; first || len(p) > 0; first = false {
		if s.keyUpdateDue || s.out.seq >= rekeyAfter {
			var err error
			if dst, err = s.sealKeyUpdate(dst); err != nil {
				return dst, err
			}
		}
		chunk := p[:min(len(p), MaxPlaintext)]
		p = p[len(chunk):]
		var err error
		if dst, err = s.seal(dst, typeAppData, chunk); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// sealKeyUpdate appends a KeyUpdate (update_not_requested) under the
// current key and moves this end to the next key.
func (s *Session) sealKeyUpdate(dst []byte) ([]byte, error) {
	dst, err := s.seal(dst, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 0})
	if err != nil {
		return dst, err
	}
	if err := s.out.set(s.suite, s.suite.nextSecret(s.out.secret), 0); err != nil {
		s.err = err
		return dst, err
	}
	s.keyUpdateDue = false
	return dst, nil
}

// seal appends one record of type typ carrying content, or, when this
// key's sequence numbers are used up, fails the session and appends
// nothing.
func (s *Session) seal(dst []byte, typ byte, content []byte) ([]byte, error) {
	if s.out.seq == exhausted {
		s.err = ErrSeqExhausted
		return dst, s.err
	}
	aead, err := s.out.cipher()
	if err != nil {
		s.err = err
		return dst, err
	}
	tag := aead.Overhead()
	start := len(dst)
	dst = slices.Grow(dst, headerLen+len(content)+1+tag)
	dst = append(dst, typeAppData, 3, 3, 0, 0)
	binary.BigEndian.PutUint16(dst[start+3:], uint16(len(content)+1+tag))
	dst = append(dst, content...)
	dst = append(dst, typ)
	body := dst[start+headerLen:]
	sealed := aead.Seal(body[:0], s.out.next(), body, dst[start:start+headerLen])
	s.out.seq++
	return dst[:start+headerLen+len(sealed)], nil
}

// AppendClose appends what ends this end's side of the connection after
// err, the error Open or Seal returned, or nil for an orderly end:
// close_notify for nil or io.EOF (the peer's close_notify), the alert an
// *AlertError of this end names, internal_error for another local failure,
// and nothing after the peer's alert, when the sequence numbers are used
// up, or after a close already appended. Seal fails after it.
func (s *Session) AppendClose(dst []byte, err error) []byte {
	if s.closed {
		return dst
	}
	a, level := AlertInternalError, byte(2) // fatal
	var ae *AlertError
	switch {
	case err == nil || errors.Is(err, io.EOF):
		a, level = AlertCloseNotify, 1 // warning
	case errors.Is(err, ErrSeqExhausted):
		return dst
	case errors.As(err, &ae):
		if ae.Remote {
			return dst
		}
		a = ae.Alert
	}
	s.closed = true
	if s.out.seq == exhausted {
		return dst
	}
	// A failure of the peer's stream leaves this end's keys sound.
	dst, _ = s.seal(dst, typeAlert, []byte{level, byte(a)})
	return dst
}

func itoa(n int) string { return strconv.Itoa(n) }
