package messages

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// marshalJSONArray writes s as a JSON array, nil included (as []): trainers read these fields
// as lists and must not meet null. elemSize is a guess of an element's length in bytes.
func marshalJSONArray[E any](name string, s []E, elemSize int, appendElem func([]byte, E) ([]byte, error)) ([]byte, error) {
	b := make([]byte, 0, 2+len(s)*elemSize)
	b = append(b, '[')
	for i, x := range s {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendElem(b, x); err != nil {
			return nil, fmt.Errorf("messages: %s[%d]: %w", name, i, err)
		}
	}
	return append(b, ']'), nil
}

func appendInt32(b []byte, x int32) ([]byte, error) { return strconv.AppendInt(b, int64(x), 10), nil }

// appendFloat32 writes the shortest decimal that reads back as the same float32: exact, yet
// no longer than the value's precision warrants.
func appendFloat32(b []byte, x float32) ([]byte, error) {
	if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%v has no JSON representation", x)
	}
	return strconv.AppendFloat(b, float64(x), 'g', -1, 32), nil
}

func appendRange(b []byte, r Range) ([]byte, error) {
	b = strconv.AppendInt(append(b, '['), int64(r.Start), 10)
	b = strconv.AppendInt(append(b, ','), int64(r.End), 10)
	return append(b, ']'), nil
}

// MarshalJSON writes t as an array of numbers; nil as [].
func (t Tokens) MarshalJSON() ([]byte, error) {
	return marshalJSONArray("Tokens", t, 7, appendInt32)
}

// MarshalJSON writes l as an array of numbers, each the shortest decimal that reads back as the
// same float32; nil as []. NaN and infinities are errors: JSON cannot represent them.
func (l Logprobs) MarshalJSON() ([]byte, error) {
	return marshalJSONArray("Logprobs", l, 12, appendFloat32)
}

// MarshalJSON writes r as the pair [start, end].
func (r Range) MarshalJSON() ([]byte, error) { return appendRange(nil, r) }

// UnmarshalJSON reads r from the pair [start, end].
func (r *Range) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var pair []int32
	if err := json.Unmarshal(data, &pair); err != nil {
		return fmt.Errorf("messages: Range: %w", err)
	}
	if len(pair) != 2 {
		return fmt.Errorf("messages: Range: want [start, end], got %d numbers", len(pair))
	}
	r.Start, r.End = pair[0], pair[1]
	return nil
}

// MarshalJSON writes r as an array of [start, end] pairs; nil as [].
func (r Ranges) MarshalJSON() ([]byte, error) {
	return marshalJSONArray("Ranges", r, 14, appendRange)
}

// MarshalJSON writes t with OpenRLHF's field names. A nil extra_logs or step_rewards is written
// as {} or [] rather than null, which Python consumers would otherwise have to special-case.
func (t Trajectory) MarshalJSON() ([]byte, error) {
	type plain Trajectory // no methods, so the Marshal below does not recurse
	p := plain(t)
	if p.ExtraLogs == nil {
		p.ExtraLogs = map[string]float64{}
	}
	if p.StepRewards == nil {
		p.StepRewards = []float64{}
	}
	return json.Marshal(p)
}
