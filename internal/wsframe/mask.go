package wsframe

import "encoding/binary"

// Mask XORs p in place with key, starting at key offset pos (taken mod 4),
// and returns the key offset for the byte after p (mod 4). Masking and
// unmasking are the same operation (RFC 6455 section 5.3), so a payload split
// over several buffers is handled by passing each call's result to the next.
// It does not allocate.
func Mask(key [4]byte, pos int, p []byte) int {
	pos &= 3
	if len(p) >= 8 {
		// Rotate the key so that k64's first byte applies to p[0]; 8 is a
		// multiple of 4, so the rotation holds for every 8-byte word.
		var k [8]byte
		for i := range k {
			k[i] = key[(pos+i)&3]
		}
		k64 := binary.LittleEndian.Uint64(k[:])
		for len(p) >= 8 {
			binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k64)
			p = p[8:]
		}
	}
	for i := range p {
		p[i] ^= key[pos]
		pos = (pos + 1) & 3
	}
	return pos
}
