package nemogym

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// The shipped example items were written by OpenRLHF's prepare_data (Python's
// json.dumps) from the same questions: preparing the plain file with its
// system prompt and agent name must reproduce them byte for byte.
func TestPrepareMatchesPythonItems(t *testing.T) {
	in, err := os.ReadFile("../examples/math/arithmetic.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../examples/math/items.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := PrepareJSONL(bytes.NewReader(in), &out, PrepareOptions{Prompt: PromptSystem, AgentName: LegacyAgentName})
	if err != nil {
		t.Fatal(err)
	}
	if n != 64 {
		t.Errorf("prepared %d items, want 64", n)
	}
	got := strings.Split(out.String(), "\n")
	for i, w := range strings.Split(string(want), "\n") {
		if i >= len(got) || got[i] != w {
			t.Fatalf("line %d:\n got %q\nwant %q", i+1, got[min(i, len(got)-1)], w)
		}
	}
}

func TestAppendPython(t *testing.T) {
	temp, maxOut := 0.7, int32(512)
	tests := []struct {
		name string
		item Item
		want string
	}{
		{
			name: "escapes as ensure_ascii",
			item: Prepare("Is é < 😀?\t\"x\"\\ \x01", "\\frac{1}{2}", nil, nil),
			want: `{"responses_create_params": {"input": [{"role": "system", "content": "Your task is to solve a math problem.  Make sure to put the answer (and only the answer) inside \\boxed{}."}, ` +
				`{"role": "user", "content": "Is \u00e9 < \ud83d\ude00?\t\"x\"\\ \u0001"}]}, "question": "Is \u00e9 < \ud83d\ude00?\t\"x\"\\ \u0001", ` +
				`"expected_answer": "\\frac{1}{2}", "agent_ref": {"type": "responses_api_agents", "name": "library_judge_math_simple_agent"}}`,
		},
		{
			name: "sampling fields",
			item: Prepare("q", "1", &temp, &maxOut),
			want: `{"responses_create_params": {"input": [{"role": "system", "content": "Your task is to solve a math problem.  Make sure to put the answer (and only the answer) inside \\boxed{}."}, ` +
				`{"role": "user", "content": "q"}], "temperature": 0.7, "max_output_tokens": 512}, "question": "q", "expected_answer": "1", ` +
				`"agent_ref": {"type": "responses_api_agents", "name": "library_judge_math_simple_agent"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.item.AppendPython(nil)
			if err != nil {
				t.Fatal(err)
			}
			got := string(b)
			if got != tt.want {
				t.Fatalf("\n got %s\nwant %s", got, tt.want)
			}
			// Whatever Python writes, JSON reads back as the same item.
			var back Item
			if err := json.Unmarshal([]byte(got), &back); err != nil {
				t.Fatal(err)
			}
			if q, _ := back.UserQuestion(); q != tt.item.Question || back.ExpectedAnswer != tt.item.ExpectedAnswer {
				t.Fatalf("read back %+v", back)
			}
		})
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{1: "1.0", 0.7: "0.7", 0: "0.0", 1e-5: "1e-05", 1e16: "1e+16", 123456.5: "123456.5", -2: "-2.0"} {
		if got := string(appendPyFloat(nil, f)); got != want {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
	}
}

func TestPrepareBadRows(t *testing.T) {
	tests := []struct{ in, wantErr string }{
		{"{\"question\": \"q\"}\n", "line 1: nemogym: row has no expected_answer"},
		{"\n{\"answer\": \"1\"}\n", "line 2: nemogym: item has no question"},
		{"{\"question\": \"q\", \"answer\": \"1\"}\nnot json\n", "line 2: invalid character"},
		// A field of the row's own that Python's json could not write either.
		{"{\"question\": \"q\", \"answer\": \"1\", \"deep\": " + strings.Repeat("[", maxPyDepth+2) + strings.Repeat("]", maxPyDepth+2) + "}\n", `line 1: nemogym: field "deep"`},
	}
	for _, tt := range tests {
		_, err := PrepareJSONL(strings.NewReader(tt.in), &bytes.Buffer{}, PrepareOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%q: err %v, want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestMessageContentParts(t *testing.T) {
	var it Item
	data := `{"responses_create_params": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is "}, {"type": "input_text", "text": "2+2?"}]}]}, "expected_answer": "4"}`
	if err := json.Unmarshal([]byte(data), &it); err != nil {
		t.Fatal(err)
	}
	if q, err := it.UserQuestion(); err != nil || q != "What is 2+2?" {
		t.Fatalf("question %q, %v", q, err)
	}
	var empty Item
	if _, err := empty.UserQuestion(); !errors.Is(err, ErrNoQuestion) {
		t.Fatalf("err %v, want ErrNoQuestion", err)
	}
}

func FuzzItem(f *testing.F) {
	f.Add(`{"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "question": "q", "expected_answer": "1"}`)
	f.Add(`{"responses_create_params": {"input": [{"role": "user", "content": [{"text": "é"}]}]}}`)
	f.Fuzz(func(t *testing.T, data string) {
		var it Item
		if json.Unmarshal([]byte(data), &it) != nil {
			return
		}
		// Whatever reads, writes as JSON that reads back the same strings.
		var back Item
		b, err := it.AppendPython(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("written item does not parse: %v", err)
		}
		if back.Question != it.Question || back.ExpectedAnswer != it.ExpectedAnswer || len(back.CreateParams.Input) != len(it.CreateParams.Input) {
			t.Fatalf("round trip changed the item: %+v vs %+v", back, it)
		}
	})
}

func ExamplePrepare() {
	item := Prepare("What is 2 + 3?", "5", nil, nil)
	b, err := item.AppendPython(nil)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
	// Output:
	// {"responses_create_params": {"input": [{"role": "system", "content": "Your task is to solve a math problem.  Make sure to put the answer (and only the answer) inside \\boxed{}."}, {"role": "user", "content": "What is 2 + 3?"}]}, "question": "What is 2 + 3?", "expected_answer": "5", "agent_ref": {"type": "responses_api_agents", "name": "library_judge_math_simple_agent"}}
}

// PrepareJSONL writes NeMo Gym's current items: the agent's new name, the
// prompt style asked for (no system prompt unless asked), and every other
// field of the row after agent_ref, in its order, as json.dumps writes it.
func TestPrepareStyles(t *testing.T) {
	row := `{"id": 7, "question": "What is 1+1?", "level": "é", "answer": "2", "meta": {"b":[1.5,1E2,-0,true,null],"a":"x"}, "agent_ref": {"name": "other"}}` + "\n"
	ref := `"agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"}`
	extra := `, "id": 7, "level": "\u00e9", "meta": {"b": [1.5, 100.0, 0, true, null], "a": "x"}}`
	for _, tc := range []struct {
		opts PrepareOptions
		want string
	}{
		{PrepareOptions{}, `{"responses_create_params": {"input": [{"role": "user", "content": "What is 1+1?"}]}, "question": "What is 1+1?", "expected_answer": "2", ` + ref + extra},
		{PrepareOptions{Prompt: PromptNemo}, `{"responses_create_params": {"input": [{"role": "user", "content": "Solve the following math problem. Make sure to put the answer (and only answer) inside \\boxed{}.\n\nWhat is 1+1?"}]}, "question": "What is 1+1?", "expected_answer": "2", ` + ref + extra},
		{PrepareOptions{Prompt: PromptSystem, AgentName: "a"}, `{"responses_create_params": {"input": [{"role": "system", "content": "` + strings.ReplaceAll(SystemPrompt, `\`, `\\`) + `"}, {"role": "user", "content": "What is 1+1?"}]}, "question": "What is 1+1?", "expected_answer": "2", "agent_ref": {"type": "responses_api_agents", "name": "a"}` + extra},
	} {
		var out bytes.Buffer
		if _, err := PrepareJSONL(strings.NewReader(row), &out, tc.opts); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(out.String(), "\n"); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.opts, got, tc.want)
		}
		var item Item
		if err := json.Unmarshal(out.Bytes(), &item); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := PrepareJSONL(strings.NewReader(row), &bytes.Buffer{}, PrepareOptions{Prompt: "chatty"}); err == nil {
		t.Error("unknown prompt style accepted")
	}
}

func TestAppendPythonJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`1`, `1`},
		{`-0`, `0`},
		{`123456789012345678901234567890`, `123456789012345678901234567890`},
		{`1.0`, `1.0`},
		{`-0.0`, `-0.0`},
		{`1e5`, `100000.0`},
		{`1e16`, `1e+16`},
		{`1.5e-5`, `1.5e-05`},
		{`1e400`, `Infinity`},
		{`1e-400`, `0.0`},
		{`"a\u00e9\ud83d\ude00<"`, `"a\u00e9\ud83d\ude00<"`},
		{`{}`, `{}`},
		{`[]`, `[]`},
		{` {"a" : [1, {"b": null}], "c": false, "a": 2} `, `{"a": 2, "c": false}`},
	} {
		got, err := AppendPythonJSON(nil, []byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("AppendPythonJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `[1,]`, `1 2`, `nul`, strings.Repeat("[", 2000) + strings.Repeat("]", 2000)} {
		if got, err := AppendPythonJSON(nil, []byte(bad)); err == nil {
			t.Errorf("AppendPythonJSON(%q) = %s, want an error", bad, got)
		}
	}
}

// FuzzAppendPythonJSON: any valid JSON value is written as JSON that reads
// back as the same value (numbers as float64), except for infinities.
func FuzzAppendPythonJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, "x\n"], "b": {"c": null}}`, `"é"`, `-0`, `1e400`, `{"a":1,"a":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := AppendPythonJSON(nil, []byte(in))
		if !json.Valid([]byte(in)) {
			if err == nil {
				t.Fatalf("invalid JSON %q accepted: %s", in, got)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "too deep") {
				return
			}
			t.Fatalf("%q: %v", in, err)
		}
		if bytes.Contains(got, []byte("Infinity")) {
			return
		}
		var a, b any
		if err := json.Unmarshal([]byte(in), &a); err != nil {
			return // numbers beyond float64: encoding/json refuses them
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatalf("%q written as invalid JSON %s: %v", in, got, err)
		}
		if !sameJSON(a, b) {
			t.Fatalf("%q became %s", in, got)
		}
	})
}

// sameJSON compares decoded JSON values, numbers by ==.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
