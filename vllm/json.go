package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Requests are encoded by hand: a prompt is thousands of token ids, and
// appending them with package jsonw into a pooled buffer costs a fraction of
// what reflection-driven encoding/json does. Responses are checked by
// encoding/json, with the large numeric arrays parsed by the list types
// below.

// appendFloat appends a finite f in its shortest exact form.
func appendFloat(b []byte, f float64) []byte {
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// tokenIDList is a JSON array of token ids. It tells an absent or null
// field (set false) from an empty array, and parses into a slice sized
// once instead of the repeated growth a plain []int32 field would cost.
type tokenIDList struct {
	ids []int32
	set bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *tokenIDList) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*l = tokenIDList{}
		return nil
	}
	ids := make([]int32, 0, countElements(data))
	err := eachNumber(data, func(e []byte) error {
		id, err := parseID(e)
		if err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("token ids: %w", err)
	}
	*l = tokenIDList{ids: ids, set: true}
	return nil
}

// tokenIDStrings is logprobs.tokens with return_tokens_as_token_ids: a JSON
// array of "token_id:<id>" strings, parsed into the ids. set is false when
// the field is absent or null. Any other string (a server that ignored the
// option) is err, never a guessed id; it matters only to a reply without
// token_ids, so it is kept, not returned.
type tokenIDStrings struct {
	ids []int32
	set bool
	err error
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *tokenIDStrings) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*l = tokenIDStrings{}
		return nil
	}
	ids, err := parseTokenIDStrings(data)
	*l = tokenIDStrings{ids: ids, set: true, err: err}
	return nil
}

// parseTokenIDStrings parses a JSON array of "token_id:<id>" strings.
func parseTokenIDStrings(data []byte) ([]int32, error) {
	ids := make([]int32, 0, countElements(data))
	err := eachElement(data, isPlainString, "plain string", func(e []byte) error {
		id, err := parseTokenID(e[1 : len(e)-1])
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("logprobs.tokens: %w", err)
	}
	return ids, nil
}

// isPlainString reports whether e is a JSON string without escapes (and so
// without a comma that splitting could have cut).
func isPlainString(e []byte) bool {
	return len(e) >= 2 && e[0] == '"' && e[len(e)-1] == '"' && !bytes.ContainsAny(e[1:len(e)-1], `"\`)
}

// logprobList is a JSON array of logprobs; set is false when the field is
// absent or null. A null element (vLLM's placeholder for a token without a
// logprob) is an error: encoding/json would silently make it 0.
type logprobList struct {
	vals []float32
	set  bool
}

// UnmarshalJSON implements json.Unmarshaler. Each value is parsed straight
// to float32. The engine computes logprobs in float32 and serialises each as
// the shortest decimal of that value widened to float64; that decimal is far
// closer to the float32 than half a float32 ulp, so rounding it to float32
// gives back exactly the value the engine computed, the same as parsing to
// float64 and converting.
func (l *logprobList) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*l = logprobList{}
		return nil
	}
	vals := make([]float32, 0, countElements(data))
	err := eachNumber(data, func(e []byte) error {
		// A value beyond float32's range fails here (ErrRange) rather than
		// becoming Inf.
		f, err := strconv.ParseFloat(string(e), 32)
		if err != nil {
			return err
		}
		vals = append(vals, float32(f))
		return nil
	})
	if err != nil {
		return fmt.Errorf("token logprobs: %w", err)
	}
	*l = logprobList{vals: vals, set: true}
	return nil
}

// stopReason is vLLM's stop_reason: null (EOS or length), the id of a stop
// token (a number), or the stop string that matched.
type stopReason string

// UnmarshalJSON implements json.Unmarshaler.
func (s *stopReason) UnmarshalJSON(data []byte) error {
	data = trimSpace(data)
	switch {
	case isNull(data):
		*s = ""
	case len(data) > 0 && data[0] == '"':
		var str string
		if err := json.Unmarshal(data, &str); err != nil {
			return fmt.Errorf("stop_reason: %w", err)
		}
		*s = stopReason(str)
	default:
		id, err := parseID(data)
		if err != nil {
			return fmt.Errorf("stop_reason: %w", err)
		}
		*s = stopReason(strconv.FormatInt(int64(id), 10))
	}
	return nil
}

// trimSpace drops JSON's insignificant whitespace from both ends of b.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isNull(data []byte) bool {
	return string(trimSpace(data)) == "null"
}

// countElements is an upper bound on the elements of a JSON array of
// numbers, for sizing the result once.
func countElements(data []byte) int {
	return bytes.Count(data, []byte{','}) + 1
}

// eachNumber calls fn with each element of data, which must be a JSON array
// whose elements are all numbers.
func eachNumber(data []byte, fn func(e []byte) error) error {
	return eachElement(data, isNumberText, "number", fn)
}

// eachElement calls fn with each element of data, which must be a JSON
// array whose elements all pass is (numbers, plain strings: values without
// a comma inside). Splitting on commas is exact for such an array, and safe
// for any other JSON the decoder hands over: an element of another kind
// (null, an escaped string, a nested value) yields a first fragment that
// fails is, and is rejected before any later fragment is looked at.
func eachElement(data []byte, is func([]byte) bool, kind string, fn func(e []byte) error) error {
	b := trimSpace(data)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return errors.New("not an array")
	}
	b = trimSpace(b[1 : len(b)-1])
	if len(b) == 0 {
		return nil
	}
	for i := 0; ; i++ {
		e, rest, more := bytes.Cut(b, []byte{','})
		e = trimSpace(e)
		if !is(e) {
			return fmt.Errorf("element %d is %.40q, not a %s", i, e, kind)
		}
		if err := fn(e); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		if !more {
			return nil
		}
		b = rest
	}
}

// isNumberText reports whether e is made only of the characters of a JSON
// number. It keeps strconv's extra syntax (NaN, Inf, hex, underscores) out.
func isNumberText(e []byte) bool {
	if len(e) == 0 {
		return false
	}
	for _, c := range e {
		if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			return false
		}
	}
	return true
}

// parseID parses a token id in canonical decimal form: digits only, no sign,
// no leading zero, at most math.MaxInt32.
func parseID[T string | []byte](s T) (int32, error) {
	if len(s) == 0 || len(s) > 10 || (s[0] == '0' && len(s) > 1) {
		return 0, fmt.Errorf("invalid token id %.40q", s)
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("invalid token id %.40q", s)
		}
		n = n*10 + int64(c-'0')
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("token id %s out of int32 range", string(s))
	}
	return int32(n), nil
}

// tokenIDPrefix starts each token string when return_tokens_as_token_ids
// is set.
const tokenIDPrefix = "token_id:"

// parseTokenID parses vLLM's "token_id:<id>" token string.
func parseTokenID[T string | []byte](s T) (int32, error) {
	if len(s) < len(tokenIDPrefix) || string(s[:len(tokenIDPrefix)]) != tokenIDPrefix {
		return 0, fmt.Errorf("token %.40q lacks the %q prefix", s, tokenIDPrefix)
	}
	return parseID(s[len(tokenIDPrefix):])
}
