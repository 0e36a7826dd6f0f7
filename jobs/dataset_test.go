package jobs

import (
	"strings"
	"testing"
)

func TestParseDataset(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		rows     int
		err      string
	}{
		{"rows and blank lines", "{\"prompt\": \"a\", \"label\": \"1\"}\n\n{\"prompt\": \"b\", \"env\": \"game:GuessTheNumber-v0\"}\n", 2, ""},
		{"bad line is named", "{\"prompt\": \"a\"}\n{oops\n", 0, "line 2"},
		{"empty", "\n  \n", 0, "no rows"},
		{"wrong type", `{"prompt": 5}`, 0, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := ParseDataset([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil || len(rows) != tc.rows {
				t.Fatalf("got %d rows, %v", len(rows), err)
			}
		})
	}
}

func FuzzParseDataset(f *testing.F) {
	f.Add([]byte("{\"prompt\": \"a\", \"label\": \"1\", \"env\": \"x\"}\n"))
	f.Add([]byte("{oops"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := ParseDataset(data)
		if err == nil && len(rows) == 0 {
			t.Fatal("success with no rows")
		}
	})
}

func TestDatasetRowForms(t *testing.T) {
	item := `{"responses_create_params": {"input": [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 2+3?"}], "temperature": 0.5, "max_output_tokens": 64}, "question": "What is 2+3?", "expected_answer": "5", "agent_ref": {"type": "responses_api_agents", "name": "x"}}`
	for _, tc := range []struct {
		name, in                string
		env, prompt, label, err string
		msgs                    int
	}{
		{name: "prompt row", in: `{"prompt": "p", "label": "l"}`, prompt: "p", label: "l"},
		{name: "nemo item", in: item, env: "math:nemo", prompt: "What is 2+3?", label: "5", msgs: 2},
		{name: "nemo item names its env", in: `{"env": "math", ` + item[1:], env: "math", prompt: "What is 2+3?", label: "5", msgs: 2},
		{name: "nemo item without question field", in: `{"responses_create_params": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Q"}]}]}, "expected_answer": "1"}`, env: "math:nemo", prompt: "Q", label: "1", msgs: 1},
		{name: "question and answer", in: `{"question": "q", "expected_answer": "7"}`, env: "math", prompt: "q", label: "7"},
		{name: "question without expected_answer", in: `{"question": "q", "answer": "7"}`, err: "without expected_answer"},
		{name: "expected_answer without question", in: `{"expected_answer": "7"}`, err: "without question"},
		{name: "item without answer", in: `{"responses_create_params": {"input": [{"role": "user", "content": "Q"}]}}`, err: "without expected_answer"},
		{name: "item without question", in: `{"responses_create_params": {"input": []}, "expected_answer": "1"}`, err: "no question"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := ParseDataset([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			if r.Env != tc.env || r.Prompt != tc.prompt || r.Label != tc.label || len(r.Messages) != tc.msgs {
				t.Fatalf("got %+v", r)
			}
		})
	}
	rows, _ := ParseDataset([]byte(item))
	if r := rows[0]; *r.Temperature != 0.5 || *r.MaxTokens != 64 || r.TopP != nil {
		t.Fatalf("sampling overrides %+v", r)
	}
}
