package tlsrecord

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

var suiteNames = map[uint16]string{
	tls.TLS_AES_128_GCM_SHA256:       "AES_128_GCM",
	tls.TLS_AES_256_GCM_SHA384:       "AES_256_GCM",
	tls.TLS_CHACHA20_POLY1305_SHA256: "CHACHA20_POLY1305",
}

// pair returns the two ends of a connection under suite id with fresh
// random secrets: the server's session and the client's (whose read is
// the server's write).
func pair(t testing.TB, id uint16) (server, client *Session) {
	t.Helper()
	size := suiteByID(id).hash().Size()
	c, s := make([]byte, size), make([]byte, size)
	rand.Read(c)
	rand.Read(s)
	server, err := NewSession(State{Suite: id, ReadSecret: c, WriteSecret: s})
	if err != nil {
		t.Fatal(err)
	}
	client, err = NewSession(State{Suite: id, ReadSecret: s, WriteSecret: c})
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}

func seal(t testing.TB, s *Session, p []byte) []byte {
	t.Helper()
	out, err := s.Seal(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rawRecord is one record the peer seals as it likes: any inner type,
// any length (the tests' way to send what a sound peer would not).
func rawRecord(t testing.TB, s *Session, typ byte, content []byte) []byte {
	t.Helper()
	out, err := s.seal(nil, typ, content)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantAlert checks that err is this end's *AlertError naming a.
func wantAlert(t *testing.T, err error, a Alert) {
	t.Helper()
	var ae *AlertError
	if !errors.As(err, &ae) || ae.Remote || ae.Alert != a {
		t.Fatalf("error %v, want this end's alert %v", err, a)
	}
}

// TestRoundTrip seals data of sizes around the record limit on one end
// and opens it on the other, the stream cut into pieces of every size
// from 1 byte to all of it at once, for each suite: the reader keeps a
// record read in part and nothing between records.
func TestRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 100, MaxPlaintext - 1, MaxPlaintext, MaxPlaintext + 1, 3*MaxPlaintext + 7}
	cuts := []int{1, 2, 4, 5, 6, 100, 16388, 16410, 1 << 20}
	for id, name := range suiteNames {
		t.Run(name, func(t *testing.T) {
			for _, cut := range cuts {
				server, client := pair(t, id)
				var stream, want []byte
				for _, n := range sizes {
					p := make([]byte, n)
					rand.Read(p)
					want = append(want, p...)
					stream = append(stream, seal(t, client, p)...)
				}
				var got []byte
				for len(stream) > 0 {
					k := min(cut, len(stream))
					var err error
					if got, err = server.Open(got, stream[:k]); err != nil {
						t.Fatalf("cut %d: %v", cut, err)
					}
					stream = stream[k:]
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("cut %d: got %d bytes, want %d, or not the same", cut, len(got), len(want))
				}
				if server.Buffered() != 0 || server.part != nil {
					t.Fatalf("cut %d: %d bytes held between records", cut, server.Buffered())
				}
			}
		})
	}
}

// TestSealRecordSizes pins that Seal's records carry at most 2^14 bytes
// and that SealedLen bounds what it appends.
func TestSealRecordSizes(t *testing.T) {
	for _, n := range []int{0, 1, MaxPlaintext, MaxPlaintext + 1, 5 * MaxPlaintext} {
		_, client := pair(t, tls.TLS_AES_128_GCM_SHA256)
		client.keyUpdateDue = true // the most Seal appends
		out := seal(t, client, make([]byte, n))
		if len(out) > SealedLen(n) {
			t.Errorf("%d bytes sealed into %d, SealedLen says at most %d", n, len(out), SealedLen(n))
		}
		for b := out; len(b) > 0; {
			l := int(b[3])<<8 | int(b[4])
			if l > MaxPlaintext+1+16 {
				t.Errorf("%d bytes: a record of %d", n, l)
			}
			b = b[headerLen+l:]
		}
	}
}

// TestFailures pins the alert each bad record gets (RFC 8446 sections
// 5.1-5.4, 6.2), and that the failure sticks.
func TestFailures(t *testing.T) {
	big := make([]byte, MaxPlaintext+1)
	tests := []struct {
		name   string
		stream func(t *testing.T, client *Session) []byte
		alert  Alert
		before string // the data read before the failure, after "before"
	}{
		{"bad tag", func(t *testing.T, c *Session) []byte {
			r := seal(t, c, []byte("hello"))
			r[len(r)-1] ^= 1
			return r
		}, AlertBadRecordMAC, ""},
		{"bad ciphertext", func(t *testing.T, c *Session) []byte {
			r := seal(t, c, []byte("hello"))
			r[headerLen] ^= 0x80
			return r
		}, AlertBadRecordMAC, ""},
		{"header changed", func(t *testing.T, c *Session) []byte {
			r := seal(t, c, []byte("hello"))
			r[1] = 1 // the legacy version is in the additional data
			return r
		}, AlertBadRecordMAC, ""},
		{"replayed record", func(t *testing.T, c *Session) []byte {
			r := seal(t, c, []byte("hello"))
			return append(r, r...)
		}, AlertBadRecordMAC, "hello"},
		{"reordered records", func(t *testing.T, c *Session) []byte {
			a, b := seal(t, c, []byte("first")), seal(t, c, []byte("second"))
			return append(b, a...)
		}, AlertBadRecordMAC, ""},
		{"dropped record", func(t *testing.T, c *Session) []byte {
			seal(t, c, []byte("lost"))
			return seal(t, c, []byte("next"))
		}, AlertBadRecordMAC, ""},
		{"empty record", func(t *testing.T, c *Session) []byte {
			return []byte{typeAppData, 3, 3, 0, 0}
		}, AlertBadRecordMAC, ""},
		{"record over 2^14+256 bytes", func(t *testing.T, c *Session) []byte {
			return []byte{typeAppData, 3, 3, byte((maxCiphertext + 1) >> 8), byte((maxCiphertext + 1) & 0xff)}
		}, AlertRecordOverflow, ""},
		{"plaintext over 2^14 bytes", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeAppData, big)
		}, AlertRecordOverflow, ""},
		{"padded plaintext over 2^14+1 bytes", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, 0, append([]byte("data\x17"), make([]byte, MaxPlaintext-4)...))
		}, AlertRecordOverflow, ""},
		{"change_cipher_spec after the handshake", func(t *testing.T, c *Session) []byte {
			return []byte{20, 3, 3, 0, 1, 1}
		}, AlertUnexpectedMessage, ""},
		{"plaintext handshake record", func(t *testing.T, c *Session) []byte {
			return []byte{typeHandshake, 3, 3, 0, 5, msgKeyUpdate, 0, 0, 1, 0}
		}, AlertUnexpectedMessage, ""},
		{"no content type", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, 0, make([]byte, 10))
		}, AlertUnexpectedMessage, ""},
		{"unknown inner type", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, 99, []byte("x"))
		}, AlertUnexpectedMessage, ""},
		{"inner change_cipher_spec", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, 20, []byte{1})
		}, AlertUnexpectedMessage, ""},
		{"NewSessionTicket from the client", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, []byte{msgNewSessionTicket, 0, 0, 4, 0, 0, 0, 0})
		}, AlertUnexpectedMessage, ""},
		{"ClientHello after the handshake", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, []byte{1, 0, 0, 2, 3, 3})
		}, AlertUnexpectedMessage, ""},
		{"Finished after the handshake", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, append([]byte{20, 0, 0, 32}, make([]byte, 32)...))
		}, AlertUnexpectedMessage, ""},
		{"empty handshake record", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, nil)
		}, AlertDecodeError, ""},
		{"KeyUpdate split across records", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1})
		}, AlertDecodeError, ""},
		{"KeyUpdate of 2 bytes", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, []byte{msgKeyUpdate, 0, 0, 2, 0, 0})
		}, AlertDecodeError, ""},
		{"KeyUpdate request_update 2", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 2})
		}, AlertIllegalParameter, ""},
		{"data after a KeyUpdate in its record", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 0, msgKeyUpdate})
		}, AlertUnexpectedMessage, ""},
		{"alert of 3 bytes", func(t *testing.T, c *Session) []byte {
			return rawRecord(t, c, typeAlert, []byte{2, 40, 0})
		}, AlertDecodeError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, client := pair(t, tls.TLS_CHACHA20_POLY1305_SHA256)
			good := seal(t, client, []byte("before"))
			stream := append(good, tt.stream(t, client)...)
			got, err := server.Open(nil, stream)
			wantAlert(t, err, tt.alert)
			if string(got) != "before"+tt.before {
				t.Errorf("data before the bad record: %q", got)
			}
			// The failure sticks: the next good record is not opened.
			if got, err := server.Open(nil, seal(t, client, []byte("after"))); len(got) != 0 || err == nil {
				t.Errorf("after the failure: %q, %v", got, err)
			}
			if _, err := server.Seal(nil, []byte("x")); err == nil {
				t.Error("Seal after the failure succeeded")
			}
			// The alert goes out, and the peer reads it as the peer's alert.
			_, err = client.Open(nil, server.AppendClose(nil, err))
			var ae *AlertError
			if !errors.As(err, &ae) || !ae.Remote || ae.Alert != tt.alert || !strings.Contains(err.Error(), tt.alert.String()) {
				t.Errorf("the client read %v, want the server's alert %v", err, tt.alert)
			}
		})
	}
}

// TestPeerAlert pins that an alert from the peer ends the session with an
// error naming it, and that this end then sends nothing (RFC 8446 section
// 6.2), user_canceled included (every TLS 1.3 alert but close_notify ends
// the connection).
func TestPeerAlert(t *testing.T) {
	for _, a := range []Alert{AlertHandshakeFailure, AlertInternalError, AlertUserCanceled, Alert(200)} {
		server, client := pair(t, tls.TLS_AES_256_GCM_SHA384)
		_, err := server.Open(nil, rawRecord(t, client, typeAlert, []byte{2, byte(a)}))
		var ae *AlertError
		if !errors.As(err, &ae) || !ae.Remote || ae.Alert != a || !strings.Contains(err.Error(), "peer sent alert "+a.String()) {
			t.Fatalf("alert %v: error %v", a, err)
		}
		if out := server.AppendClose(nil, err); len(out) != 0 {
			t.Errorf("alert %v: answered with %d bytes", a, len(out))
		}
	}
}

// TestCloseNotify pins the orderly end: the data before the client's
// close_notify, then a clean io.EOF that sticks and ignores what follows;
// this end can still write, then sends its own close_notify, which the
// client reads as EOF; and Seal fails after it.
func TestCloseNotify(t *testing.T) {
	server, client := pair(t, tls.TLS_AES_128_GCM_SHA256)
	stream := seal(t, client, []byte("last words"))
	stream = client.AppendClose(stream, nil)
	stream = append(stream, rawRecord(t, client, typeAppData, []byte("ignored"))...)
	got, err := server.Open(nil, stream)
	if err != io.EOF || string(got) != "last words" {
		t.Fatalf("got %q, %v; want the data and io.EOF", got, err)
	}
	if _, err := server.Open(nil, []byte{1, 2, 3}); err != io.EOF {
		t.Fatalf("after close_notify: %v", err)
	}
	if _, err := server.Export(); err != ErrEnded {
		t.Errorf("Export of a closed session: %v", err)
	}
	out := seal(t, server, []byte("reply"))
	out = server.AppendClose(out, err)
	got, err = client.Open(nil, out)
	if err != io.EOF || string(got) != "reply" {
		t.Fatalf("client got %q, %v", got, err)
	}
	if _, err := server.Seal(nil, []byte("x")); err != ErrClosed {
		t.Fatalf("Seal after close: %v", err)
	}
	if out := server.AppendClose(nil, nil); len(out) != 0 {
		t.Error("a second close_notify")
	}
}

// TestKeyUpdate pins RFC 8446 section 4.6.3 on receipt: update_not_requested
// rotates the read key only; update_requested rotates it and makes this
// end send a KeyUpdate of its own before its next data, once for several
// requests, and rotate its write key; the peer, who rotates on reading
// it, reads the data after it. Old keys no longer open anything.
func TestKeyUpdate(t *testing.T) {
	for id, name := range suiteNames {
		t.Run(name, func(t *testing.T) {
			server, client := pair(t, id)
			writeSecret := server.out.secret
			// Not requested.
			stream := seal(t, client, []byte("a"))
			stream = append(stream, rawRecord(t, client, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 0})...)
			if err := client.out.set(client.suite, client.suite.nextSecret(client.out.secret), 0); err != nil {
				t.Fatal(err)
			}
			stream = append(stream, seal(t, client, []byte("b"))...)
			got, err := server.Open(nil, stream)
			if err != nil || string(got) != "ab" {
				t.Fatalf("got %q, %v", got, err)
			}
			if server.keyUpdateDue || !bytes.Equal(server.out.secret, writeSecret) || server.in.seq != 1 {
				t.Fatal("update_not_requested changed the write side")
			}
			// Requested, twice.
			stream = nil
			for range 2 {
				stream = append(stream, rawRecord(t, client, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1})...)
				if err := client.out.set(client.suite, client.suite.nextSecret(client.out.secret), 0); err != nil {
					t.Fatal(err)
				}
			}
			stream = append(stream, seal(t, client, []byte("c"))...)
			if got, err = server.Open(nil, stream); err != nil || string(got) != "c" || !server.keyUpdateDue {
				t.Fatalf("got %q, %v, due %v", got, err, server.keyUpdateDue)
			}
			out := seal(t, server, []byte("d"))
			out = append(out, seal(t, server, []byte("e"))...)
			if server.keyUpdateDue || bytes.Equal(server.out.secret, writeSecret) || server.out.seq != 2 {
				t.Fatalf("write key not rotated once: seq %d", server.out.seq)
			}
			// One KeyUpdate record, then two data records under the new key.
			if n := countRecords(out); n != 3 {
				t.Fatalf("%d records sealed, want a KeyUpdate and two data", n)
			}
			if got, err = client.Open(nil, out); err != nil || string(got) != "de" {
				t.Fatalf("client got %q, %v", got, err)
			}
		})
	}
}

func countRecords(b []byte) int {
	n := 0
	for len(b) >= headerLen {
		b = b[headerLen+(int(b[3])<<8|int(b[4])):]
		n++
	}
	return n
}

// TestSeqWrap drives sequence numbers to the end of their 64 bits through
// the sessions' fields (no record is sent 2^64 times): no record is ever
// sealed or opened at the last number, so no nonce is used twice. This
// end's writer, past rekeyAfter, moves to a new key with a KeyUpdate at
// 2^64-2 and seals the data at 0; at 2^64-1 (rekeying too late) Seal
// appends nothing and fails. The reader refuses a record the peer would
// seal at 2^64-1.
func TestSeqWrap(t *testing.T) {
	t.Run("write rekeys", func(t *testing.T) {
		server, client := pair(t, tls.TLS_AES_128_GCM_SHA256)
		server.out.seq, client.in.seq = exhausted-1, exhausted-1
		out := seal(t, server, []byte("x"))
		if server.out.seq != 1 || countRecords(out) != 2 {
			t.Fatalf("after a record at 2^64-2: seq %d, %d records", server.out.seq, countRecords(out))
		}
		if got, err := client.Open(nil, out); err != nil || string(got) != "x" {
			t.Fatalf("client got %q, %v", got, err)
		}
	})
	t.Run("write refuses", func(t *testing.T) {
		server, _ := pair(t, tls.TLS_AES_128_GCM_SHA256)
		server.out.seq = exhausted
		out, err := server.Seal([]byte("kept"), []byte("x"))
		if err != ErrSeqExhausted || string(out) != "kept" {
			t.Fatalf("Seal at 2^64-1: %q, %v", out, err)
		}
		if out := server.AppendClose(nil, err); len(out) != 0 {
			t.Fatal("an alert sealed at 2^64-1")
		}
		if _, err := server.Seal(nil, []byte("x")); err != ErrSeqExhausted {
			t.Fatalf("Seal after: %v", err)
		}
	})
	t.Run("read refuses", func(t *testing.T) {
		server, client := pair(t, tls.TLS_AES_128_GCM_SHA256)
		saved := rekeyAfter
		rekeyAfter = math.MaxUint64 // a peer that does not rekey
		t.Cleanup(func() { rekeyAfter = saved })
		server.in.seq, client.out.seq = exhausted-1, exhausted-1
		stream := seal(t, client, []byte("last"))
		client.out.seq = 0 // a peer that wraps, using the nonce of its first record again
		stream = append(stream, rawRecord(t, client, typeAppData, []byte("wraps"))...)
		got, err := server.Open(nil, stream)
		if err != ErrSeqExhausted || string(got) != "last" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
}

// TestRekeyAfter pins that the writer moves to a new key by itself after
// rekeyAfter records (AES-GCM's limit per key), and the peer follows.
func TestRekeyAfter(t *testing.T) {
	server, client := pair(t, tls.TLS_AES_256_GCM_SHA384)
	server.out.seq, client.in.seq = rekeyAfter, rekeyAfter
	out := seal(t, server, []byte("x"))
	if countRecords(out) != 2 || server.out.seq != 1 {
		t.Fatalf("%d records, seq %d", countRecords(out), server.out.seq)
	}
	if got, err := client.Open(nil, out); err != nil || string(got) != "x" {
		t.Fatalf("client got %q, %v", got, err)
	}
}

// TestState pins the hand-over (issue 33): a session in the middle of a
// record read in part and with a KeyUpdate due, exported, encoded,
// decoded and restored, goes on as the first would have, both ways, and
// the first refuses to go on.
func TestState(t *testing.T) {
	for id, name := range suiteNames {
		t.Run(name, func(t *testing.T) {
			server, client := pair(t, id)
			stream := seal(t, client, []byte("one"))
			stream = append(stream, rawRecord(t, client, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1})...)
			client.out.set(client.suite, client.suite.nextSecret(client.out.secret), 0)
			stream = append(stream, seal(t, client, bytes.Repeat([]byte("two"), 1000))...)
			cut := len(stream) - 1000
			got, err := server.Open(nil, stream[:cut])
			if err != nil || string(got) != "one" || server.Buffered() == 0 {
				t.Fatalf("got %q, %v, %d buffered", got, err, server.Buffered())
			}
			st, err := server.Export()
			if err != nil {
				t.Fatal(err)
			}
			// The exported session is over: it cannot seal under the keys
			// the next one takes.
			if _, err := server.Seal(nil, []byte("x")); err != ErrEnded {
				t.Fatalf("Seal after Export: %v", err)
			}
			if _, err := server.Open(nil, []byte{typeAppData}); err != ErrEnded {
				t.Fatalf("Open after Export: %v", err)
			}
			b, err := st.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if len(b)-len(st.Partial) > 122 {
				t.Errorf("state of %d bytes besides the partial record", len(b)-len(st.Partial))
			}
			var back State
			if err := back.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			next, err := NewSession(back)
			if err != nil {
				t.Fatal(err)
			}
			got, err = next.Open(nil, stream[cut:])
			if err != nil || string(got) != strings.Repeat("two", 1000) {
				t.Fatalf("restored session got %d bytes, %v", len(got), err)
			}
			out := seal(t, next, []byte("three"))
			if got, err := client.Open(nil, out); err != nil || string(got) != "three" {
				t.Fatalf("client got %q, %v", got, err)
			}
		})
	}
}

// TestStateRejects pins what UnmarshalBinary and NewSession refuse.
func TestStateRejects(t *testing.T) {
	secret := make([]byte, 32)
	good := State{Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: secret, WriteSecret: secret, Partial: []byte{typeAppData, 3, 3, 0, 30, 1}}
	b, _ := good.MarshalBinary()
	var st State
	for i := range b {
		if st.UnmarshalBinary(b[:i]) == nil {
			t.Errorf("truncated to %d bytes: decoded", i)
		}
	}
	if st.UnmarshalBinary(append(b, 0)) == nil {
		t.Error("a trailing byte: decoded")
	}
	tests := map[string]State{
		"unknown suite":    {Suite: 0x1304 /* TLS_AES_128_CCM_SHA256 */, ReadSecret: secret, WriteSecret: secret},
		"TLS 1.2 suite":    {Suite: tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, ReadSecret: secret, WriteSecret: secret},
		"short secret":     {Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: secret[:31], WriteSecret: secret},
		"SHA-384 suite":    {Suite: tls.TLS_AES_256_GCM_SHA384, ReadSecret: secret, WriteSecret: secret},
		"whole partial":    {Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: secret, WriteSecret: secret, Partial: []byte{typeAppData, 3, 3, 0, 1, 1}},
		"overflow partial": {Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: secret, WriteSecret: secret, Partial: []byte{typeAppData, 3, 3, 0xff, 0xff}},
	}
	for name, st := range tests {
		if _, err := NewSession(st); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	if _, err := NewSession(good); err != nil {
		t.Errorf("good state: %v", err)
	}
}

// TestPartialHoldsWhatCame pins what a record read in part costs: the
// bytes that came (a client that sends a full record's header and one
// byte, then stops, holds a few bytes, not 16 KiB), and nothing once the
// record is whole.
func TestPartialHoldsWhatCame(t *testing.T) {
	server, client := pair(t, tls.TLS_AES_128_GCM_SHA256)
	rec := seal(t, client, make([]byte, MaxPlaintext))
	if _, err := server.Open(nil, rec[:headerLen+1]); err != nil {
		t.Fatal(err)
	}
	if server.Buffered() != headerLen+1 || cap(server.part) > 64 {
		t.Fatalf("%d bytes held in a buffer of %d", server.Buffered(), cap(server.part))
	}
	got, err := server.Open(nil, rec[headerLen+1:])
	if err != nil || len(got) != MaxPlaintext || server.part != nil {
		t.Fatalf("%d bytes, %v, %d held", len(got), err, cap(server.part))
	}
}

// TestPadding pins that zero padding after the content type is cut
// (RFC 8446 section 5.4), up to an inner plaintext of 2^14+1 bytes.
func TestPadding(t *testing.T) {
	server, client := pair(t, tls.TLS_CHACHA20_POLY1305_SHA256)
	data := bytes.Repeat([]byte("x"), 100)
	var stream []byte
	for _, pad := range []int{1, 1000, MaxPlaintext - 100} { // the last: 2^14+1 bytes in all
		stream = append(stream, rawRecord(t, client, 0, append(append(slices.Clone(data), typeAppData), make([]byte, pad-1)...))...)
	}
	got, err := server.Open(nil, stream)
	if err != nil || !bytes.Equal(got, bytes.Repeat(data, 3)) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
}

// TestRelease pins Session.Release: after it a session holds no AEAD
// state, and records sealed and opened across releases (a record read in
// part included, and a KeyUpdate each way) are those of a session never
// released, in each suite.
func TestRelease(t *testing.T) {
	for id, name := range suiteNames {
		t.Run(name, func(t *testing.T) {
			server, client := pair(t, id)
			release := func() {
				server.Release()
				if server.in.aead != nil || server.out.aead != nil {
					t.Fatal("an AEAD state held after Release")
				}
			}
			release()
			rec := seal(t, client, []byte("one"))
			got, err := server.Open(nil, rec[:7])
			if err != nil || len(got) != 0 {
				t.Fatalf("part: %q, %v", got, err)
			}
			release()
			if got, err = server.Open(nil, rec[7:]); err != nil || string(got) != "one" {
				t.Fatalf("got %q, %v", got, err)
			}
			release()
			out := seal(t, server, []byte("two"))
			release()
			out = append(out, seal(t, server, []byte("three"))...)
			if got, err = client.Open(nil, out); err != nil || string(got) != "twothree" {
				t.Fatalf("client got %q, %v", got, err)
			}
			// A KeyUpdate with update_requested, then data, across releases.
			stream := rawRecord(t, client, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1})
			if err := client.out.set(client.suite, client.suite.nextSecret(client.out.secret), 0); err != nil {
				t.Fatal(err)
			}
			if got, err = server.Open(nil, stream); err != nil || len(got) != 0 {
				t.Fatalf("KeyUpdate: %q, %v", got, err)
			}
			release()
			if got, err = server.Open(nil, seal(t, client, []byte("four"))); err != nil || string(got) != "four" {
				t.Fatalf("after the client's KeyUpdate: %q, %v", got, err)
			}
			release()
			out = seal(t, server, []byte("five")) // the server's KeyUpdate, then "five"
			release()
			out = append(out, seal(t, server, []byte("six"))...)
			if got, err = client.Open(nil, out); err != nil || string(got) != "fivesix" {
				t.Fatalf("after the server's KeyUpdate: %q, %v", got, err)
			}
			// A tampered record still fails after a release.
			bad := seal(t, client, []byte("seven"))
			bad[len(bad)-1] ^= 1
			release()
			_, err = server.Open(nil, bad)
			wantAlert(t, err, AlertBadRecordMAC)
		})
	}
}
