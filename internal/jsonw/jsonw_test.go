package jsonw

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// marshal is encoding/json's encoding of v, without HTML escaping.
func marshal(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// FuzzAppendString checks the string encoder against encoding/json: the
// same bytes, appended after what dst already holds, decoding to the same
// string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{
		"", "plain", "<|im_end|>\n", "a\"b\\c", "quote\" back\\slash", "\x00\x1f\n\t\r\b\f", "\x00\x1f\x7f",
		"\xff<>&", "\xff\xfe", "\u2028\u2029é", "é\u2028😀", "a\xc3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString([]byte("x"), s)
		if got[0] != 'x' {
			t.Fatalf("AppendString(%q) overwrote dst: %s", s, got)
		}
		got = got[1:]
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s: invalid JSON: %v", s, got, err)
		}
		want := marshal(t, s)
		var wantBack string
		if err := json.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		if back != wantBack {
			t.Fatalf("AppendString(%q) decodes to %q, want %q", s, back, wantBack)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json gives %s", s, got, want)
		}
	})
}

func TestAppendInt32s(t *testing.T) {
	for _, vals := range [][]int32{
		nil, {}, {0}, {7, 8, 9, 10, 11}, {99, 100, 101}, {998, 999, 1000, 1001},
		{-1, -9, -10, -99, -100, -999, -1000}, {258, 151645, 2147483647, math.MinInt32},
	} {
		got := AppendInt32s([]byte("x"), vals)
		want := "x" + string(marshal(t, append([]int32{}, vals...)))
		if string(got) != want {
			t.Errorf("AppendInt32s(%v) = %s, want %s", vals, got, want)
		}
	}
}

// FuzzAppendInt32s checks the array encoder against encoding/json.
func FuzzAppendInt32s(f *testing.F) {
	f.Add(int32(0), int32(999), int32(1000))
	f.Add(int32(-1), int32(258), int32(math.MinInt32))
	f.Fuzz(func(t *testing.T, a, b, c int32) {
		vals := []int32{a, b, c}
		if got, want := AppendInt32s(nil, vals), marshal(t, vals); !bytes.Equal(got, want) {
			t.Fatalf("AppendInt32s(%v) = %s, encoding/json gives %s", vals, got, want)
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	s := strings.Repeat("<think>\nThe number is between 1 and 20, so I guess \\boxed{10}.\n</think>\n", 16)
	buf := make([]byte, 0, 2*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = AppendString(buf[:0], s)
	}
}

func BenchmarkAppendInt32s(b *testing.B) {
	for _, bc := range []struct {
		name string
		max  int32
	}{{"small", 259}, {"large", 151936}} {
		vals := make([]int32, 1024)
		for i := range vals {
			vals[i] = int32(uint32(i) * 2654435761 % uint32(bc.max))
		}
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, 8<<10)
			for b.Loop() {
				buf = AppendInt32s(buf[:0], vals)
			}
		})
	}
}
