package messages

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// packable are the element types sent as packed little-endian 32-bit words. Each is made only of
// 4-byte words and holds no pointers, so a slice of them can be viewed as its bytes.
type packable interface {
	int32 | float32 | Range
}

// nativeLittleEndian reports whether the host stores words in wire order, so packed slices can be
// written and read without conversion. It is a variable so tests can exercise the swapping path.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// asBytes views s's memory as bytes without copying.
func asBytes[E packable](s []E) []byte {
	var zero E
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// swapWords reverses the bytes of every 4-byte word of b in place, converting between
// little-endian and big-endian words.
func swapWords(b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:]))
	}
}

// encodePacked writes s as one bin value of little-endian words.
func encodePacked[E packable](enc *msgpack.Encoder, s []E) error {
	b := asBytes(s)
	if err := enc.EncodeBytesLen(len(b)); err != nil {
		return err
	}
	if !nativeLittleEndian {
		b = append([]byte(nil), b...)
		swapWords(b)
	}
	_, err := enc.Writer().Write(b)
	return err
}

// decodePacked reads a bin value written by encodePacked. A msgpack nil and an empty bin both
// decode to nil. what names the Go type in errors.
func decodePacked[E packable](dec *msgpack.Decoder, what string) ([]E, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil {
		return nil, fmt.Errorf("messages: %s: %w: %w", what, ErrMalformed, err)
	}
	var zero E
	size := int(unsafe.Sizeof(zero))
	switch {
	case n <= 0: // -1 is msgpack nil
		return nil, nil
	case n%size != 0:
		return nil, fmt.Errorf("messages: %s: %w: packed length %d is not a multiple of %d", what, ErrMalformed, n, size)
	case n > MaxMessageSize:
		// Guards the allocation below when the decoder is used on unbounded input.
		return nil, fmt.Errorf("messages: %s: %w: packed length %d exceeds %d", what, ErrTooLarge, n, MaxMessageSize)
	}
	s := make([]E, n/size)
	b := asBytes(s)
	if err := dec.ReadFull(b); err != nil {
		return nil, fmt.Errorf("messages: %s: %w: %w", what, ErrMalformed, err)
	}
	if !nativeLittleEndian {
		swapWords(b)
	}
	return s, nil
}

// EncodeMsgpack writes t as one bin value of packed little-endian int32s.
func (t Tokens) EncodeMsgpack(enc *msgpack.Encoder) error { return encodePacked(enc, t) }

// DecodeMsgpack reads t from a bin value of packed little-endian int32s.
func (t *Tokens) DecodeMsgpack(dec *msgpack.Decoder) (err error) {
	*t, err = decodePacked[int32](dec, "Tokens")
	return err
}

// EncodeMsgpack writes l as one bin value of packed little-endian float32s.
func (l Logprobs) EncodeMsgpack(enc *msgpack.Encoder) error { return encodePacked(enc, l) }

// DecodeMsgpack reads l from a bin value of packed little-endian float32s.
func (l *Logprobs) DecodeMsgpack(dec *msgpack.Decoder) (err error) {
	*l, err = decodePacked[float32](dec, "Logprobs")
	return err
}

// EncodeMsgpack writes r as one bin value of packed little-endian int32 pairs (start, end).
func (r Ranges) EncodeMsgpack(enc *msgpack.Encoder) error { return encodePacked(enc, r) }

// DecodeMsgpack reads r from a bin value of packed little-endian int32 pairs (start, end).
func (r *Ranges) DecodeMsgpack(dec *msgpack.Decoder) (err error) {
	*r, err = decodePacked[Range](dec, "Ranges")
	return err
}
