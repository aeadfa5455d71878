package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"errors"
	"testing"
)

// fuzzStream builds a client's byte stream from script: each step is an
// op byte, a length byte and that many bytes of payload. Op 0 seals the
// payload as application data, op 1 seals a record of inner type
// payload[0] with the rest as content (a KeyUpdate among them moves the
// client to its next key, as a sound client would), op 2 appends the
// payload as raw bytes, op 3 flips a bit of the stream so far. It returns
// the stream and the application data of the records sealed before the
// first raw or changed byte, which a reader must return whole when
// nothing else went in.
func fuzzStream(client *Session, script []byte) (stream, want []byte, clean bool) {
	clean = true
	for len(script) >= 2 {
		op, n := script[0]%4, int(script[1])
		script = script[2:]
		n = min(n, len(script))
		p := script[:n]
		script = script[n:]
		switch op {
		case 0:
			out, err := client.Seal(stream, p)
			if err != nil {
				return stream, want, clean
			}
			stream = out
			if clean {
				want = append(want, p...)
			}
		case 1:
			if len(p) == 0 {
				continue
			}
			out, err := client.seal(stream, p[0], p[1:])
			if err != nil {
				return stream, want, clean
			}
			stream = out
			clean = false // the reader may refuse it, rightly
			if p[0] == typeHandshake && bytes.Equal(p[1:], []byte{msgKeyUpdate, 0, 0, 1, p[len(p)-1]}) && p[len(p)-1] <= 1 {
				client.out.set(client.suite, client.suite.nextSecret(client.out.secret), 0)
			}
		case 2:
			stream = append(stream, p...)
			clean = false
		case 3:
			if len(stream) > 0 && len(p) > 0 {
				stream[int(p[0])*len(stream)/256] ^= 1 << (p[len(p)-1] % 8)
				clean = false
			}
		}
	}
	return stream, want, clean
}

// FuzzOpen feeds the record reader streams built from sealed records of
// every inner type, raw bytes and flipped bits, all at once and in
// pieces of cut bytes. It must not panic, must give the same data and
// error either way (it keeps a record read in part, no more), must hold
// no more than one record, must return every byte of a clean stream, and
// a failure must stick.
func FuzzOpen(f *testing.F) {
	f.Add([]byte{0, 5, 'h', 'e', 'l', 'l', 'o'}, uint16(1))
	f.Add([]byte{0, 3, 'a', 'b', 'c', 0, 2, 'd', 'e'}, uint16(7))
	f.Add([]byte{1, 6, typeHandshake, msgKeyUpdate, 0, 0, 1, 1, 0, 1, 'x'}, uint16(3))
	f.Add([]byte{1, 6, typeHandshake, msgKeyUpdate, 0, 0, 1, 0, 0, 1, 'y'}, uint16(100))
	f.Add([]byte{1, 3, typeAlert, 1, 0, 0, 1, 'z'}, uint16(2))
	f.Add([]byte{1, 3, typeAlert, 2, 40}, uint16(5))
	f.Add([]byte{1, 5, typeHandshake, msgNewSessionTicket, 0, 0, 0}, uint16(5))
	f.Add([]byte{1, 4, 0, 0, 0, 0}, uint16(6))
	f.Add([]byte{0, 2, 'o', 'k', 2, 5, typeAppData, 3, 3, 0x41, 0x01}, uint16(4))
	f.Add([]byte{0, 2, 'o', 'k', 3, 2, 200, 3}, uint16(9))
	f.Add([]byte{2, 6, 20, 3, 3, 0, 1, 1}, uint16(1))
	f.Fuzz(fuzzOpen)
}

func fuzzOpen(t *testing.T, script []byte, cut uint16) {
	// Fixed secrets: a run depends on its input only.
	c, sv := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	id := uint16(tls.TLS_CHACHA20_POLY1305_SHA256)
	secret := State{Suite: id, ReadSecret: c, WriteSecret: sv}
	server, err := NewSession(secret)
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewSession(State{Suite: id, ReadSecret: sv, WriteSecret: c})
	if err != nil {
		t.Fatal(err)
	}
	stream, want, clean := fuzzStream(client, script)

	whole, errWhole := server.Open(nil, stream)

	again, err := NewSession(secret)
	if err != nil {
		t.Fatal(err)
	}
	var pieces []byte
	var errPieces error
	step := int(cut)%(len(stream)+1) + 1
	for b := stream; len(b) > 0 && errPieces == nil; {
		k := min(step, len(b))
		pieces, errPieces = again.Open(pieces, b[:k])
		b = b[k:]
		if again.Buffered() > headerLen+maxCiphertext {
			t.Fatalf("%d bytes held", again.Buffered())
		}
	}
	if !bytes.Equal(whole, pieces) || !sameErr(errWhole, errPieces) {
		t.Fatalf("whole: %d bytes, %v; in pieces of %d: %d bytes, %v", len(whole), errWhole, step, len(pieces), errPieces)
	}
	if clean && (errWhole != nil || !bytes.Equal(whole, want)) {
		t.Fatalf("clean stream: %d bytes of %d, %v", len(whole), len(want), errWhole)
	}
	if errWhole != nil {
		if _, err := server.Open(nil, stream); !sameErr(err, errWhole) {
			t.Fatalf("failure %v, then %v", errWhole, err)
		}
	}
}

func sameErr(a, b error) bool {
	var x, y *AlertError
	if errors.As(a, &x) && errors.As(b, &y) {
		return *x == *y
	}
	return a == b
}

// FuzzState decodes a State from any bytes: no panic, in NewSession
// either, and what decodes encodes to the same bytes.
func FuzzState(f *testing.F) {
	secret := bytes.Repeat([]byte{7}, 48)
	for _, st := range []State{
		{Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: secret[:32], WriteSecret: secret[:32]},
		{Suite: tls.TLS_AES_256_GCM_SHA384, ReadSecret: secret, WriteSecret: secret, ReadSeq: 9, WriteSeq: 1 << 40, KeyUpdateDue: true},
		{Suite: tls.TLS_CHACHA20_POLY1305_SHA256, ReadSecret: secret[:32], WriteSecret: secret[:32], Partial: []byte{typeAppData, 3, 3, 0, 40, 1, 2}},
	} {
		b, err := st.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var st State
		if st.UnmarshalBinary(b) != nil {
			return
		}
		again, err := st.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decoded and encoded again: %x, %v; was %x", again, err, b)
		}
		if s, err := NewSession(st); err == nil {
			s.Open(nil, []byte{typeAppData, 3, 3, 0, 17})
		}
	})
}
