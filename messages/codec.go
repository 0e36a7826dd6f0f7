package messages

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxMessageSize bounds every encoded message, matching the largest payload the NATS servers are
// configured to accept.
const MaxMessageSize = 8 << 20

var (
	// ErrMalformed is matched (errors.Is) by decode errors for bytes that are not a well-formed
	// msgpack encoding of the requested type.
	ErrMalformed = errors.New("malformed msgpack")
	// ErrTooLarge is matched by errors for messages larger than MaxMessageSize.
	ErrTooLarge = errors.New("message too large")
	// errDecoderPanic marks a panic recovered inside the msgpack decoder; tests treat it as a bug.
	errDecoderPanic = errors.New("decoder panicked")
)

// maxPooledBuffer keeps a rare huge message from pinning its buffer in the encoder pool.
const maxPooledBuffer = 1 << 20

type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = msgpack.NewEncoder(&e.buf)
	e.enc.UseCompactInts(true) // most ints are small; 1-byte fixints instead of 9-byte int64s
	return e
}}

// Marshal encodes v (a message or a pointer to one) as msgpack. The result is a fresh slice the
// caller may keep. Marshal does not validate v; it fails when the encoding exceeds MaxMessageSize,
// so an oversize message is caught before it is published.
func Marshal(v any) ([]byte, error) {
	e := encoders.Get().(*encoder)
	defer func() {
		if e.buf.Cap() <= maxPooledBuffer {
			encoders.Put(e)
		}
	}()
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, fmt.Errorf("messages: encode %s: %w", typeName(reflect.TypeOf(v)), err)
	}
	if n := e.buf.Len(); n > MaxMessageSize {
		return nil, fmt.Errorf("messages: encode %s: %w: %d bytes, limit %d",
			typeName(reflect.TypeOf(v)), ErrTooLarge, n, MaxMessageSize)
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

type decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := new(decoder)
	d.dec = msgpack.NewDecoder(&d.r) // bytes.Reader is a ByteScanner, so no extra buffering
	return d
}}

// Decode decodes a message of type T from data and validates it, so a handler sees only messages
// that satisfy T's Validate rules. Errors name the type ("messages: decode StepEvent: …") and
// match ErrTooLarge, ErrMalformed or ErrInvalid (and ErrVersion). The result shares no memory with
// data. Decode never panics, whatever the input.
func Decode[T any, P interface {
	*T
	Validate() error
}](data []byte) (*T, error) {
	v := new(T)
	if err := decodeInto(data, v); err != nil {
		return nil, &decodeError{typ: typeName(reflect.TypeFor[T]()), err: err}
	}
	if err := P(v).Validate(); err != nil {
		return nil, &decodeError{typ: typeName(reflect.TypeFor[T]()), err: err}
	}
	return v, nil
}

// decodeInto bounds and checks data before the reflective decoder sees it, then decodes it into v.
func decodeInto(data []byte, v any) (err error) {
	if len(data) > MaxMessageSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxMessageSize)
	}
	if err := checkWellFormed(data); err != nil {
		return err
	}
	d := decoders.Get().(*decoder)
	defer func() {
		// A worker hosting thousands of episodes must not die of one hostile message, even if
		// the decoder has a bug the checks above do not cover; the decoder is not reused.
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %w: %v", ErrMalformed, errDecoderPanic, p)
			return
		}
		d.r.Reset(nil)
		decoders.Put(d)
	}()
	d.r.Reset(data)
	d.dec.Reset(&d.r)
	if err := d.dec.Decode(v); err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

// decodeError adds the decoded type to an error, dropping the inner error's own package prefix
// so the text reads "messages: decode StepEvent: StepEvent.turn: …".
type decodeError struct {
	typ string
	err error
}

func (e *decodeError) Error() string {
	return "messages: decode " + e.typ + ": " + strings.TrimPrefix(e.err.Error(), "messages: ")
}

func (e *decodeError) Unwrap() error { return e.err }

// typeName is the bare name of a message type, without pointer or package.
func typeName(t reflect.Type) string {
	if t == nil {
		return "nil"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() == "" {
		return t.String()
	}
	return t.Name()
}

// Limits enforced on untrusted input before decoding. The msgpack decoder allocates from declared
// lengths (a 5-byte header can claim 4 GiB, and arrays are allocated in full before their
// elements are read) and skips unknown fields recursively; real messages nest a few levels and
// hold at most a few thousand elements per array or map (long data travels as packed bins).
const (
	maxNesting      = 32
	maxContainerLen = 1 << 16
)

// checkWellFormed reports whether data is exactly one msgpack value whose every declared length
// fits in data and stays within the limits above.
func checkWellFormed(data []byte) error {
	s := scanner{data: data}
	if err := s.value(0); err != nil {
		return err
	}
	if s.off != len(data) {
		return fmt.Errorf("%w: %d trailing bytes after the value", ErrMalformed, len(data)-s.off)
	}
	return nil
}

// scanner walks msgpack without decoding it.
type scanner struct {
	data []byte
	off  int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, s.off, fmt.Sprintf(format, args...))
}

// uint reads a big-endian unsigned length of size bytes (1, 2 or 4).
func (s *scanner) uint(size int) (uint64, error) {
	if len(s.data)-s.off < size {
		return 0, s.errorf("truncated")
	}
	b := s.data[s.off : s.off+size]
	s.off += size
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	default:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
}

func (s *scanner) skip(n uint64) error {
	if n > uint64(len(s.data)-s.off) {
		return s.errorf("length %d exceeds the %d bytes left", n, len(s.data)-s.off)
	}
	s.off += int(n)
	return nil
}

// skipSized skips a payload whose length is given by the next size bytes, plus extra bytes (the
// type byte of an ext).
func (s *scanner) skipSized(size int, extra uint64) error {
	n, err := s.uint(size)
	if err != nil {
		return err
	}
	return s.skip(n + extra)
}

// container scans n values (2n for a map of n entries) nested one level deeper.
func (s *scanner) container(n uint64, perEntry uint64, depth int) error {
	if n > maxContainerLen {
		return s.errorf("%d entries exceed the limit of %d", n, maxContainerLen)
	}
	for i := uint64(0); i < n*perEntry; i++ {
		if err := s.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// sizedContainer is container with a length given by the next size bytes.
func (s *scanner) sizedContainer(size int, perEntry uint64, depth int) error {
	n, err := s.uint(size)
	if err != nil {
		return err
	}
	return s.container(n, perEntry, depth)
}

func (s *scanner) value(depth int) error {
	if depth > maxNesting {
		return s.errorf("nested deeper than %d", maxNesting)
	}
	if s.off >= len(s.data) {
		return s.errorf("truncated")
	}
	c := s.data[s.off]
	s.off++
	switch {
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return nil
	case c <= 0x8f: // fixmap
		return s.container(uint64(c&0x0f), 2, depth)
	case c <= 0x9f: // fixarray
		return s.container(uint64(c&0x0f), 1, depth)
	case c <= 0xbf: // fixstr
		return s.skip(uint64(c & 0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return nil
	case 0xc4, 0xd9: // bin8, str8
		return s.skipSized(1, 0)
	case 0xc5, 0xda: // bin16, str16
		return s.skipSized(2, 0)
	case 0xc6, 0xdb: // bin32, str32
		return s.skipSized(4, 0)
	case 0xc7: // ext8
		return s.skipSized(1, 1)
	case 0xc8: // ext16
		return s.skipSized(2, 1)
	case 0xc9: // ext32
		return s.skipSized(4, 1)
	case 0xca: // float32
		return s.skip(4)
	case 0xcb: // float64
		return s.skip(8)
	case 0xcc, 0xd0: // uint8, int8
		return s.skip(1)
	case 0xcd, 0xd1: // uint16, int16
		return s.skip(2)
	case 0xce, 0xd2: // uint32, int32
		return s.skip(4)
	case 0xcf, 0xd3: // uint64, int64
		return s.skip(8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type byte + data
		return s.skip(1 + 1<<(c-0xd4))
	case 0xdc: // array16
		return s.sizedContainer(2, 1, depth)
	case 0xdd: // array32
		return s.sizedContainer(4, 1, depth)
	case 0xde: // map16
		return s.sizedContainer(2, 2, depth)
	case 0xdf: // map32
		return s.sizedContainer(4, 2, depth)
	}
	s.off--
	return s.errorf("invalid code 0x%02x", c)
}
