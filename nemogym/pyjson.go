package nemogym

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// appendPyString appends s as Python's json.dumps (ensure_ascii=True) quotes
// it: the short escapes for quote, backslash and \n \r \t \b \f, \u00XX for
// other control characters, and \uXXXX (surrogate pairs beyond the BMP) for
// everything outside ASCII. Invalid UTF-8 becomes U+FFFD, as Go strings
// decoded from JSON already are.
func appendPyString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u4 := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b = appendASCII(b, byte(r))
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			b = u4(u4(b, hi), lo)
		default:
			b = u4(b, r)
		}
	}
	return append(b, '"')
}

// appendASCII appends an ASCII byte of a JSON string as both of Python's
// writers (json.dumps and orjson) do: the short escapes for quote,
// backslash and \b \f \n \r \t, \u00XX for the other control
// characters, the byte itself otherwise.
func appendASCII(b []byte, c byte) []byte {
	const hex = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	}
	if c < 0x20 {
		return append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
	}
	return append(b, c)
}

// appendPyFloat appends f as Python's float repr: the shortest round-trip
// digits, ".0" on integral values, exponent form below 1e-4 and from 1e16.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go writes e+16 and e-05; Python writes e+16 and e-05 too, but
		// keeps at least two exponent digits, as Go does.
		return append(b, s...)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return append(b, s...)
}

// AppendPythonJSON appends the JSON value raw as Python's json.dumps writes
// what json.loads made of it: ", " and ": " separators, non-ASCII escaped,
// object members in their order (a repeated key keeps its first place and
// its last value, as a dict does), integers as their digits (-0 as 0),
// numbers with a fraction or an exponent as float reprs (1E5 is 100000.0,
// 1e400 Infinity). raw must hold exactly one JSON value.
func AppendPythonJSON(b []byte, raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readPyValue(dec, 0)
	if err != nil {
		return b, fmt.Errorf("nemogym: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return b, errors.New("nemogym: more than one JSON value")
	}
	return v.append(b), nil
}

// maxPyDepth bounds the nesting of the values AppendPythonJSON reads.
const maxPyDepth = 1000

// pyValue is a decoded JSON value with its object members in order.
type pyValue struct {
	tok  json.Token // a scalar: string, json.Number, bool or nil
	kind byte       // '{', '[' or 0 for a scalar
	keys []string
	vals []pyValue
}

func readPyValue(dec *json.Decoder, depth int) (pyValue, error) {
	if depth > maxPyDepth {
		return pyValue{}, errors.New("JSON nested too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return pyValue{}, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return pyValue{tok: tok}, nil
	}
	v := pyValue{kind: byte(d)}
	switch d {
	case '{':
		at := map[string]int{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return v, err
			}
			key, _ := kt.(string)
			val, err := readPyValue(dec, depth+1)
			if err != nil {
				return v, err
			}
			if i, dup := at[key]; dup {
				v.vals[i] = val
				continue
			}
			at[key] = len(v.keys)
			v.keys, v.vals = append(v.keys, key), append(v.vals, val)
		}
	case '[':
		for dec.More() {
			val, err := readPyValue(dec, depth+1)
			if err != nil {
				return v, err
			}
			v.vals = append(v.vals, val)
		}
	default:
		return v, fmt.Errorf("unexpected %v", d)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return v, err
	}
	return v, nil
}

func (v pyValue) append(b []byte) []byte {
	switch v.kind {
	case '{':
		b = append(b, '{')
		for i, k := range v.keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = v.vals[i].append(append(appendPyString(b, k), ": "...))
		}
		return append(b, '}')
	case '[':
		b = append(b, '[')
		for i, x := range v.vals {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = x.append(b)
		}
		return append(b, ']')
	}
	switch t := v.tok.(type) {
	case string:
		return appendPyString(b, t)
	case bool:
		if t {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			n, ok := new(big.Int).SetString(s, 10)
			if ok {
				return n.Append(b, 10)
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return append(b, "NaN"...) // not reached: the decoder checked the number
		}
		return appendPyFloat(b, f)
	}
	return append(b, "null"...)
}
