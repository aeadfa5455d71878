package tlsrecord

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// suite is a TLS 1.3 cipher suite: its AEAD and the hash of its key
// schedule.
type suite struct {
	id     uint16
	hash   func() hash.Hash
	keyLen int
	aead   func(key []byte) (cipher.AEAD, error)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

var suites = []*suite{
	{tls.TLS_AES_128_GCM_SHA256, sha256.New, 16, newGCM},
	{tls.TLS_AES_256_GCM_SHA384, sha512.New384, 32, newGCM},
	{tls.TLS_CHACHA20_POLY1305_SHA256, sha256.New, chacha20poly1305.KeySize, chacha20poly1305.New},
}

// suiteByID is the suite id names, or nil if this package does not run it.
func suiteByID(id uint16) *suite {
	for _, s := range suites {
		if s.id == id {
			return s
		}
	}
	return nil
}

// expandLabel is HKDF-Expand-Label(secret, label, "", length) (RFC 8446
// section 7.1).
func (s *suite) expandLabel(secret []byte, label string, length int) []byte {
	info := make([]byte, 0, 2+1+6+len(label)+1)
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0) // empty context
	out, err := hkdf.Expand(s.hash, secret, string(info), length)
	if err != nil {
		panic("tlsrecord: " + err.Error()) // only for lengths over 255 hashes
	}
	return out
}

// nextSecret is the traffic secret after a KeyUpdate (RFC 8446 section
// 7.2).
func (s *suite) nextSecret(secret []byte) []byte {
	return s.expandLabel(secret, "traffic upd", len(secret))
}

// keys is one direction's record protection: the key and IV of a
// traffic secret, the sequence number of the next record under it, and
// the AEAD of the key, made from it when a record needs it (cipher) and
// dropped by Session.Release.
type keys struct {
	secret []byte
	suite  *suite
	aead   cipher.AEAD // nil until cipher makes it, and after a release
	key    [32]byte    // suite.keyLen bytes of it
	iv     [ivLen]byte
	seq    uint64
	nonce  [ivLen]byte // scratch
}

const ivLen = 12

// set derives the key and IV of secret (RFC 8446 section 7.3), with the
// sequence number at seq.
func (k *keys) set(s *suite, secret []byte, seq uint64) error {
	key := s.expandLabel(secret, "key", s.keyLen)
	aead, err := s.aead(key)
	if err != nil {
		return err
	}
	copy(k.key[:], key)
	clear(key)
	copy(k.iv[:], s.expandLabel(secret, "iv", ivLen))
	k.secret, k.suite, k.aead, k.seq = secret, s, aead, seq
	return nil
}

// cipher returns the AEAD of the key, made again if it was released.
func (k *keys) cipher() (cipher.AEAD, error) {
	if k.aead == nil {
		aead, err := k.suite.aead(k.key[:k.suite.keyLen])
		if err != nil {
			return nil, err
		}
		k.aead = aead
	}
	return k.aead, nil
}

// next is the nonce of the record at k.seq: the IV XOR the sequence
// number (RFC 8446 section 5.3). The caller has checked that seq is not
// exhausted and moves it on after using the nonce.
func (k *keys) next() []byte {
	k.nonce = k.iv
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], k.seq)
	for i, b := range seq {
		k.nonce[ivLen-8+i] ^= b
	}
	return k.nonce[:]
}
