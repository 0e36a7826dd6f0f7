package nemogym

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// The shipped example items were written by Python's json.dumps from the
// same questions: preparing the plain file must reproduce them byte for byte.
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
	n, err := PrepareJSONL(bytes.NewReader(in), &out, PrepareOptions{})
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
			got := string(tt.item.AppendPython(nil))
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
		if err := json.Unmarshal(it.AppendPython(nil), &back); err != nil {
			t.Fatalf("written item does not parse: %v", err)
		}
		if back.Question != it.Question || back.ExpectedAnswer != it.ExpectedAnswer || len(back.CreateParams.Input) != len(it.CreateParams.Input) {
			t.Fatalf("round trip changed the item: %+v vs %+v", back, it)
		}
	})
}

func ExamplePrepare() {
	item := Prepare("What is 2 + 3?", "5", nil, nil)
	os.Stdout.Write(append(item.AppendPython(nil), '\n'))
	// Output:
	// {"responses_create_params": {"input": [{"role": "system", "content": "Your task is to solve a math problem.  Make sure to put the answer (and only the answer) inside \\boxed{}."}, {"role": "user", "content": "What is 2 + 3?"}]}, "question": "What is 2 + 3?", "expected_answer": "5", "agent_ref": {"type": "responses_api_agents", "name": "library_judge_math_simple_agent"}}
}
