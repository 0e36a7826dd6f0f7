package vllm

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func FuzzDecodeCompletion(f *testing.F) {
	noIDs := strings.Replace(completionJSON, `"token_ids":[151667,271,151668,271,59,90,151645],`, "", 1)
	for _, s := range []string{
		completionJSON,
		noIDs,
		strings.Replace(noIDs, "token_id:271", "token_id:2x", 1),
		`{"choices":[{"text":"","logprobs":{"token_logprobs":[]},"finish_reason":"length","token_ids":[]}]}`,
		`{"choices":[{"logprobs":{"token_logprobs":[-1e39,null]},"finish_reason":"stop","stop_reason":7,"token_ids":[1,2]}]}`,
		`{"choices":[{"logprobs":{"tokens":["token_id:0"],"token_logprobs":[ -0.0 ]},"finish_reason":"stop","stop_reason":"x"}]}`,
		`{"choices":[]}`, `null`, `[]`, ``, `{"choices":[{"token_ids":[1,,2]}]}`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range malformedReplies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeCompletion(data)
		if err != nil {
			if !errors.Is(err, ErrBadResponse) {
				t.Fatalf("error %v is not ErrBadResponse", err)
			}
			return
		}
		if len(c.TokenIDs) != len(c.Logprobs) {
			t.Fatalf("%d ids, %d logprobs", len(c.TokenIDs), len(c.Logprobs))
		}
		if tops, err := decodeTopLogprobs(data, len(c.TokenIDs)); err == nil {
			for i, tp := range tops {
				if len(tp.IDs) != len(tp.Logprobs) || !slices.IsSortedFunc(tp.Logprobs, func(a, b float32) int { return cmp.Compare(b, a) }) {
					t.Fatalf("top_logprobs[%d] %+v: not aligned or not most likely first", i, tp)
				}
			}
		} else if !errors.Is(err, ErrBadResponse) {
			t.Fatalf("top_logprobs error %v is not ErrBadResponse", err)
		}
		for i, id := range c.TokenIDs {
			if id < 0 {
				t.Fatalf("id %d is %d", i, id)
			}
		}
		for i, lp := range c.Logprobs {
			if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) {
				t.Fatalf("logprob %d is %v", i, lp)
			}
		}
		if c.FinishReason == "" {
			t.Fatal("success without a finish reason")
		}
	})
}

func FuzzParseTokenID(f *testing.F) {
	for _, s := range []string{"token_id:0", "token_id:151645", "token_id:2147483647", "token_id:2147483648",
		"token_id:-1", "token_id:+1", "token_id:007", "token_id:", "token_id:1 ", "token_id:1e3", "Token_id:1", "151645", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseTokenID(s)
		// Exactly the canonical form parses: the prefix and the id's decimal.
		canonical := false
		if rest, ok := strings.CutPrefix(s, tokenIDPrefix); ok {
			n, perr := strconv.ParseInt(rest, 10, 32)
			canonical = perr == nil && n >= 0 && strconv.FormatInt(n, 10) == rest
		}
		switch {
		case err == nil && !canonical:
			t.Fatalf("parseTokenID(%q) = %d, want an error", s, id)
		case err != nil && canonical:
			t.Fatalf("parseTokenID(%q): %v", s, err)
		case err == nil && tokenIDPrefix+strconv.Itoa(int(id)) != s:
			t.Fatalf("parseTokenID(%q) = %d", s, id)
		}
	})
}

func FuzzDecodeError(f *testing.F) {
	for _, s := range []string{
		`{"object":"error","message":"This model's maximum context length is 10 tokens.","type":"BadRequestError","param":null,"code":400}`,
		`{"error":{"message":"x","type":"t","code":"c"}}`,
		`{"error":{"message":null}}`, `{"error":"x"}`, `{"message":5}`, `{"code":[1]}`, "upstream error", "", "\xff\xfe",
	} {
		f.Add(400, []byte(s))
		f.Add(503, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := decodeAPIError(status, body)
		if e.Status != status {
			t.Fatalf("status %d, want %d", e.Status, status)
		}
		for _, s := range []string{e.Message, e.Type, e.Code} {
			if len(s) > maxMessage+len("…") {
				t.Fatalf("field of %d bytes", len(s))
			}
		}
		_ = e.Error()
		if errors.Is(e, ErrContextLength) && status != 400 {
			t.Fatalf("status %d is a context-length error", status)
		}
		if errors.Is(e, ErrUnavailable) != (status >= 500 || status == 429 || status == 408) {
			t.Fatalf("status %d: ErrUnavailable = %v", status, errors.Is(e, ErrUnavailable))
		}
	})
}

// FuzzNumberLists checks the array parsers against encoding/json on valid
// JSON: they accept exactly the arrays of numbers that fit, with the same
// values.
func FuzzNumberLists(f *testing.F) {
	for _, s := range []string{`[]`, ` [ 1 , 2 ] `, `[-0.5,1e-3,-9999.0]`, `[1,null]`, `["1,2"]`, `[[1,2]]`, `[{"a":1,"b":2}]`,
		`[1e39]`, `[2147483648]`, `[0,01]`, `[1,]`, `[NaN]`, `null`, `{}`, `[true]`, `[1.0]`, `[-0]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids tokenIDList
		idErr := ids.UnmarshalJSON(data)
		var lps logprobList
		lpErr := lps.UnmarshalJSON(data)
		if !json.Valid(data) || isNull(data) {
			return // the decoder never hands over invalid JSON; null is "absent"
		}
		var elems []json.RawMessage
		if json.Unmarshal(data, &elems) != nil {
			if idErr == nil || lpErr == nil {
				t.Fatalf("%q is not an array, yet parsed", data)
			}
			return
		}
		var wantIDs []int32
		var wantLps []float32
		idsOK, lpsOK := true, true
		for _, e := range elems {
			var num json.Number
			if json.Unmarshal(e, &num) != nil || bytes.HasPrefix(bytes.TrimSpace(e), []byte(`"`)) {
				idsOK, lpsOK = false, false
				break
			}
			// A token id is a non-negative int32 in canonical decimal ("-0" is not).
			if n, err := strconv.ParseInt(num.String(), 10, 32); err == nil && n >= 0 && strconv.FormatInt(n, 10) == num.String() {
				wantIDs = append(wantIDs, int32(n))
			} else {
				idsOK = false
			}
			if v, err := strconv.ParseFloat(num.String(), 32); err == nil {
				wantLps = append(wantLps, float32(v))
			} else {
				lpsOK = false
			}
		}
		if idsOK != (idErr == nil) {
			t.Fatalf("token ids %q: err %v, want ok=%v", data, idErr, idsOK)
		}
		if lpsOK != (lpErr == nil) {
			t.Fatalf("logprobs %q: err %v, want ok=%v", data, lpErr, lpsOK)
		}
		if idsOK && !slices.EqualFunc(ids.ids, wantIDs, func(a, b int32) bool { return a == b }) {
			t.Fatalf("token ids %q = %v, want %v", data, ids.ids, wantIDs)
		}
		if lpsOK && !slices.EqualFunc(lps.vals, wantLps, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Fatalf("logprobs %q = %v, want %v", data, lps.vals, wantLps)
		}
	})
}
