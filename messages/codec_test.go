package messages

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// join concatenates byte pieces, for hand-written msgpack.
func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// zeros is n zero bytes.
func zeros(n int) []byte { return make([]byte, n) }

// everyKind is one complete value of every msgpack format.
var everyKind = map[string][]byte{
	"positive fixint": {0x05}, "negative fixint": {0xe0}, "nil": {0xc0}, "false": {0xc2}, "true": {0xc3},
	"fixmap":   {0x81, 0xa1, 'k', 0x01},
	"fixarray": {0x92, 0x01, 0x02},
	"fixstr":   {0xa3, 'a', 'b', 'c'},
	"bin8":     {0xc4, 1, 9}, "bin16": {0xc5, 0, 1, 9}, "bin32": {0xc6, 0, 0, 0, 1, 9},
	"ext8": {0xc7, 1, 5, 9}, "ext16": {0xc8, 0, 1, 5, 9}, "ext32": {0xc9, 0, 0, 0, 1, 5, 9},
	"float32": join([]byte{0xca}, zeros(4)), "float64": join([]byte{0xcb}, zeros(8)),
	"uint8": {0xcc, 1}, "uint16": {0xcd, 0, 1}, "uint32": join([]byte{0xce}, zeros(4)), "uint64": join([]byte{0xcf}, zeros(8)),
	"int8": {0xd0, 1}, "int16": {0xd1, 0, 1}, "int32": join([]byte{0xd2}, zeros(4)), "int64": join([]byte{0xd3}, zeros(8)),
	"fixext1": {0xd4, 5, 1}, "fixext2": {0xd5, 5, 1, 2}, "fixext4": join([]byte{0xd6, 5}, zeros(4)),
	"fixext8": join([]byte{0xd7, 5}, zeros(8)), "fixext16": join([]byte{0xd8, 5}, zeros(16)),
	"str8": {0xd9, 1, 'x'}, "str16": {0xda, 0, 1, 'x'}, "str32": {0xdb, 0, 0, 0, 1, 'x'},
	"array16": {0xdc, 0, 1, 0xc0}, "array32": {0xdd, 0, 0, 0, 1, 0xc0},
	"map16": {0xde, 0, 1, 0xa1, 'k', 0xc0}, "map32": {0xdf, 0, 0, 0, 1, 0xa1, 'k', 0xc0},
}

// TestCheckWellFormedEveryKind checks the pre-decode scan against msgpack itself: it accepts one
// value of every format, consuming exactly what the library's Skip consumes, and rejects every
// truncation of it.
func TestCheckWellFormedEveryKind(t *testing.T) {
	for name, b := range everyKind {
		if err := checkWellFormed(b); err != nil {
			t.Errorf("%s (% x): %v", name, b, err)
		}
		r := bytes.NewReader(b)
		if err := msgpack.NewDecoder(r).Skip(); err != nil || r.Len() != 0 {
			t.Errorf("%s (% x): msgpack.Skip disagrees: %v, %d bytes left", name, b, err, r.Len())
		}
		for n := range len(b) {
			if err := checkWellFormed(b[:n]); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s truncated to %d bytes: got %v, want ErrMalformed", name, n, err)
			}
		}
	}
}

func TestCheckWellFormedLimits(t *testing.T) {
	deep := join(bytes.Repeat([]byte{0x91}, maxNesting+1), []byte{0xc0})
	wide := join([]byte{0xdd, 0, 1, 0, 1}, bytes.Repeat([]byte{0xc0}, maxContainerLen+1))
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", "truncated", nil},
		{"never-used code", "invalid code 0xc1", []byte{0xc1}},
		{"trailing bytes", "1 trailing bytes", []byte{0xc0, 0xc0}},
		{"nesting", "nested deeper", deep},
		{"array beyond the limit", "entries exceed", wide},
		{"map declaring 4G entries", "entries exceed", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}},
		{"bin declaring 4 GiB", "exceeds the", []byte{0x81, 0xa2, 'o', 't', 0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2}},
		{"str past the end", "exceeds the", []byte{0xa5, 'a'}},
	} {
		err := checkWellFormed(tc.data)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrMalformed mentioning %q", tc.name, err, tc.want)
		}
	}
	if err := checkWellFormed(deep[1:]); err != nil {
		t.Errorf("nesting at the limit: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := mustMarshal(t, sampleStep())
	negTurn := mustMarshal(t, with(sampleStep, func(e *StepEvent) { e.Turn = -1 }))
	newer := mustMarshal(t, with(sampleStep, func(e *StepEvent) { e.V = Version + 1 }))
	wrongType := mustMarshal(t, map[string]any{"v": 1, "id": "e", "tn": "zero"})
	for _, tc := range []struct {
		name string
		data []byte
		is   []error
		text string
	}{
		{"too large", make([]byte, MaxMessageSize+1), []error{ErrTooLarge}, "messages: decode StepEvent: message too large: 8388609 bytes, limit 8388608"},
		{"empty", nil, []error{ErrMalformed}, "messages: decode StepEvent: malformed msgpack: at byte 0: truncated"},
		{"trailing", append(bytes.Clone(valid), 0xc0), []error{ErrMalformed}, "trailing bytes"},
		{"truncated", valid[:len(valid)-1], []error{ErrMalformed}, "messages: decode StepEvent: malformed msgpack"},
		{"not a map", []byte{0x92, 1, 2}, []error{ErrMalformed}, "messages: decode StepEvent: malformed msgpack: msgpack:"},
		{"field of the wrong type", wrongType, []error{ErrMalformed}, "messages: decode StepEvent: malformed msgpack"},
		{"invalid", negTurn, []error{ErrInvalid}, "messages: decode StepEvent: StepEvent.turn: must be >= 0, got -1"},
		{"newer version", newer, []error{ErrInvalid, ErrVersion}, "messages: decode StepEvent: StepEvent.v: version 2 is newer than supported 1"},
		{"nil is no message", []byte{0xc0}, []error{ErrVersion}, "StepEvent.v: missing version"},
	} {
		got, err := Decode[StepEvent](tc.data)
		if got != nil || err == nil {
			t.Errorf("%s: got %+v, %v; want an error", tc.name, got, err)
			continue
		}
		for _, target := range tc.is {
			if !errors.Is(err, target) {
				t.Errorf("%s: %v does not match %v", tc.name, err, target)
			}
		}
		if !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %q does not contain %q", tc.name, err, tc.text)
		}
	}
}

// TestDecodeIgnoresUnknownFields keeps the wire forward-compatible: a newer sender may add fields.
func TestDecodeIgnoresUnknownFields(t *testing.T) {
	var m map[string]any
	if err := msgpack.Unmarshal(mustMarshal(t, sampleFailure()), &m); err != nil {
		t.Fatal(err)
	}
	m["zz"] = []any{1, "two", map[string]any{"three": 3.0}}
	got, err := Decode[Failure](mustMarshal(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != sampleFailure().Reason {
		t.Errorf("got %+v", got)
	}
}

func TestDecodeResultOwnsItsMemory(t *testing.T) {
	data := mustMarshal(t, sampleGenerateReply())
	got, err := Decode[GenerateReply](data)
	if err != nil {
		t.Fatal(err)
	}
	clear(data)
	if want := sampleGenerateReply(); got.Text != want.Text || !sameBits(got.Logprobs, want.Logprobs) || got.Tokens[0] != want.Tokens[0] {
		t.Errorf("decoded message changed with its input buffer: %+v", got)
	}
}

func TestMarshalResultIsFresh(t *testing.T) {
	a := mustMarshal(t, sampleStep())
	keep := bytes.Clone(a)
	for range 10 {
		mustMarshal(t, sampleTrajectory()) // reuses the pooled buffer
	}
	if !bytes.Equal(a, keep) {
		t.Error("a later Marshal overwrote an earlier result")
	}
}

func TestMarshalTooLarge(t *testing.T) {
	r := sampleGenerateRequest()
	r.Prompt = make(Tokens, MaxMessageSize/4)
	_, err := Marshal(r)
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "messages: encode GenerateRequest: message too large") {
		t.Errorf("got %v", err)
	}
	if _, err := Marshal(make(chan int)); err == nil || !strings.HasPrefix(err.Error(), "messages: encode chan int: ") {
		t.Errorf("unencodable value: got %v", err)
	}
}
