package shard

import (
	"encoding/binary"
	"math/bits"
)

// HashText returns what PostgreSQL's hashtext(s) returns for text in a deterministic collation on a
// little-endian server. That is hash_bytes (Bob Jenkins' lookup3) of the string's bytes, as int4.
func HashText(s string) int32 {
	return int32(hashBytes([]byte(s)))
}

// hashBytes is PostgreSQL's hash_bytes (src/common/hashfn.c), little-endian.
func hashBytes(k []byte) uint32 {
	n := uint32(len(k))
	a := 0x9e3779b9 + n + 3923095
	b, c := a, a
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k[0:])
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The tail: bytes 8..10 go to c's upper three bytes, 4..7 to b, 0..3 to a.
	for i := len(k) - 1; i >= 0; i-- {
		switch {
		case i >= 8:
			c += uint32(k[i]) << (8 * (i - 7))
		case i >= 4:
			b += uint32(k[i]) << (8 * (i - 4))
		default:
			a += uint32(k[i]) << (8 * i)
		}
	}
	return final(a, b, c)
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
