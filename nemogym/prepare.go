package nemogym

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// QA is one question/answer row of a file to prepare. The answer may be
// named expected_answer, answer or label, and the question question or
// prompt.
type QA struct {
	Question string
	Answer   string
	// Extra are the row's other fields, in order: every key but the
	// question's and answer's spellings and the fields an item has itself
	// (responses_create_params, agent_ref).
	Extra []Field
}

// qaKeys are the keys a prepared item does not carry over from its row.
var qaKeys = map[string]bool{
	"question": true, "prompt": true, "expected_answer": true, "answer": true, "label": true,
	"responses_create_params": true, "agent_ref": true,
}

// UnmarshalJSON reads the accepted spellings of a question/answer row.
func (q *QA) UnmarshalJSON(data []byte) error {
	var raw struct {
		Question       *string `json:"question"`
		Prompt         *string `json:"prompt"`
		ExpectedAnswer *string `json:"expected_answer"`
		Answer         *string `json:"answer"`
		Label          *string `json:"label"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	pick := func(ss ...*string) (string, bool) {
		for _, s := range ss {
			if s != nil {
				return *s, true
			}
		}
		return "", false
	}
	var ok bool
	if q.Question, ok = pick(raw.Question, raw.Prompt); !ok || q.Question == "" {
		return ErrNoQuestion
	}
	if q.Answer, ok = pick(raw.ExpectedAnswer, raw.Answer, raw.Label); !ok {
		return fmt.Errorf("nemogym: row has no expected_answer, answer or label")
	}
	fields, err := ObjectFields(data)
	if err != nil {
		return err
	}
	q.Extra = q.Extra[:0]
	for _, f := range fields {
		if !qaKeys[f.Key] {
			q.Extra = append(q.Extra, f)
		}
	}
	return nil
}

// ObjectFields returns the members of a JSON object in their order, a
// repeated key once, at its first place, with its last value (as Python's
// json.loads makes a dict of it).
func ObjectFields(data []byte) ([]Field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, errors.New("nemogym: row is not a JSON object")
	}
	var fields []Field
	at := map[string]int{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if i, dup := at[key]; dup {
			fields[i].Value = v
			continue
		}
		at[key] = len(fields)
		fields = append(fields, Field{Key: key, Value: v})
	}
	return fields, nil
}

// PrepareOptions are the optional sampling fields written into every item,
// the prompt style (PromptPlain when empty) and the agent name (AgentName
// when empty).
type PrepareOptions struct {
	Temperature     *float64
	MaxOutputTokens *int32
	Prompt          string
	AgentName       string
}

// PrepareJSONL turns question/answer rows (JSONL) into NeMo Gym data items
// (JSONL), one per row in order, each keeping its row's other fields after
// agent_ref, and returns how many it wrote. A bad row is an error naming its
// line; blank lines are skipped.
func PrepareJSONL(r io.Reader, w io.Writer, opts PrepareOptions) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	if _, err := PrepareItem("", "", opts); err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	var line []byte
	n := 0
	for lineNo := 1; sc.Scan(); lineNo++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var qa QA
		if err := json.Unmarshal(sc.Bytes(), &qa); err != nil {
			return n, fmt.Errorf("nemogym: line %d: %w", lineNo, err)
		}
		item, _ := PrepareItem(qa.Question, qa.Answer, opts) // the style was checked above
		item.Extra = qa.Extra
		var err error
		if line, err = item.AppendPython(line[:0]); err != nil {
			return n, fmt.Errorf("nemogym: line %d: %w", lineNo, err)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return n, fmt.Errorf("nemogym: write: %w", err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("nemogym: read: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("nemogym: write: %w", err)
	}
	return n, nil
}
